// The GPU backend's view of the KV format registry: which formats have GPU kernels, their names,
// the head_dim rules and row sizes the kernels take, and the checks on a cache side. Plain host
// code in kvgate_kernels, so it builds (and is tested) without a GPU toolchain, and the registry
// entry decides everything a second list of GPU formats used to.
#include <cfloat>
#include <string>

#include "core/error.h"
#include "kernels/arithmetic.h"
#include "kernels/gpu/kv_checks.h"
#include "kernels/kv_format.h"

namespace kvgate::kernels::gpu {
namespace {

const FormatInfo& entry_of(FormatId format) {
  const FormatInfo* f = find_format(format);
  if (!f) throw_usage_error("GPU KV format: no registered format has id " + std::to_string(static_cast<int>(format)));
  return *f;
}

std::string name_of(FormatId format) { return std::string(entry_of(format).name); }

}  // namespace

std::vector<FormatId> kv_formats() {
  std::vector<FormatId> out;
  for (const FormatInfo* f : all_formats())
    if (f->gpu != GpuStorage::none) out.push_back(f->id);
  return out;
}

const char* kv_format_name(FormatId format) { return entry_of(format).name.data(); }

std::optional<FormatId> kv_format_named(std::string_view name) {
  const FormatInfo* f = find_format(name);
  if (!f || f->gpu == GpuStorage::none) return std::nullopt;
  return f->id;
}

size_t kv_row_bytes(FormatId format, int head_dim) {
  const FormatInfo& f = entry_of(format);
  if (f.gpu == GpuStorage::none)
    throw_usage_error("GPU KV format " + std::string(f.name) + " has no GPU kernels (" + std::string(f.name) +
                      " runs on the CPU only)");
  if (head_dim < 1 || head_dim > kMaxKvHeadDim)
    throw_usage_error("GPU KV format " + std::string(f.name) + ": head_dim must be in 1.." + std::to_string(kMaxKvHeadDim) +
                      ", got " + std::to_string(head_dim));
  if (head_dim % f.head_dim_multiple != 0)
    throw_usage_error("GPU KV format " + std::string(f.name) + ": head_dim must be a multiple of " +
                      std::to_string(f.head_dim_multiple) + ", got " + std::to_string(head_dim));
  if (f.head_dim_power_of_two && (head_dim & (head_dim - 1)) != 0)
    throw_usage_error("GPU KV format " + std::string(f.name) + ": head_dim must be a power of two, got " +
                      std::to_string(head_dim));
  return row_bytes(format, head_dim);
}

void check_kv_scale(FormatId format, float scale) {
  if (entry_of(format).accepts(kOptionScale) && !(scale > 0.0f && scale < FLT_MAX))
    throw_usage_error("GPU KV format " + name_of(format) + ": scale must be a positive finite number, got " +
                      std::to_string(scale));
}

void check_plain_rows(FormatId format, const char* what) {
  const GpuStorage storage = entry_of(format).gpu;
  if (storage == GpuStorage::turboquant || storage == GpuStorage::windowed)
    throw_usage_error(std::string("GPU ") + what + ": " + name_of(format) +
                      (storage == GpuStorage::turboquant
                           ? " needs its codec constants (the overload taking TqConstants)"
                           : " is stored through a window and token groups; use DevicePagedKv"));
}

void check_tq_constants(FormatId format, int head_dim, const std::optional<TqConstants>& tq, const std::string& what) {
  const bool needs = entry_of(format).gpu == GpuStorage::turboquant;
  const size_t square = static_cast<size_t>(head_dim) * head_dim;
  auto matches = [&](const std::shared_ptr<const std::vector<float>>& m, const float* ptr) {
    return ptr == nullptr ? !m : m && m->size() == square && ptr == m->data();
  };
  if (needs != tq.has_value() ||
      (tq && (tq->params.bits != tq_bits(format) || tq->params.outliers < 0 || tq->params.outliers > head_dim ||
              is_tqprod(format) != (tq->params.sketch != nullptr) || !matches(tq->sketch, tq->params.sketch) ||
              !matches(tq->rotation_matrix, tq->params.rotation_matrix))))
    throw_usage_error(what + ": " + name_of(format) +
                      (needs ? " needs matching TurboQuant constants (make_tq_params)" : " takes no TurboQuant constants"));
  if (needs && (head_dim > kTqMaxHeadDim || (!tq->rotation_matrix && (head_dim & (head_dim - 1)) != 0)))
    throw_usage_error(what + ": TurboQuant keys need a head_dim up to " + std::to_string(kTqMaxHeadDim) +
                      ", a power of two with the Walsh-Hadamard rotation; got " + std::to_string(head_dim));
}

void check_kv_side(const KvSideFormat& side, const PagedKvShape& shape, bool is_key) {
  const FormatInfo& f = entry_of(side.format);
  check_kv_scale(side.format, side.scale);
  check_tq_constants(side.format, shape.head_dim, side.tq, "GPU paged KV");
  const int d = shape.head_dim;
  // rot=hadamard rotates the whole head (a power of two); rot=wht blocks that divide it.
  const int rotation_unit = side.rotation && side.rotation->block > 0 ? side.rotation->block : d;
  if (side.rotation && (!f.accepts(kOptionRotation) || (rotation_unit & (rotation_unit - 1)) != 0 || d % rotation_unit != 0))
    throw_usage_error("GPU paged KV: " + std::string(f.name) +
                      (f.accepts(kOptionRotation)
                           ? " with a Walsh-Hadamard rotation needs power-of-two blocks dividing head_dim, got " +
                                 std::to_string(rotation_unit) + " for head_dim " + std::to_string(d)
                           : std::string(" takes no Hadamard rotation")));
  if (!is_key && !f.for_values) throw_usage_error("GPU paged KV: " + std::string(f.name) + " stores keys only");
  if (is_key && !f.for_keys) throw_usage_error("GPU paged KV: " + std::string(f.name) + " stores values only");
  kv_row_bytes(side.format, d);  // validates head_dim for the format
  if (f.gpu == GpuStorage::windowed) {
    const int group = is_kivi_key(side.format) ? (side.group > 0 ? side.group : kKiviDefaultGroup) : 1;
    if (side.residual < 0 || shape.page_tokens % group != 0)
      throw_usage_error("GPU paged KV: " + std::string(f.name) + " needs residual >= 0 and a group (" +
                        std::to_string(group) + ") dividing the page (" + std::to_string(shape.page_tokens) + " tokens)");
  }
}

AttentionArithmetic kv_arithmetic(const PagedKvShape& shape, int n_queries) {
  if (shape.arithmetic == Arithmetic::exact) return {};
  return resolve_arithmetic(shape.arithmetic, entry_of(shape.key.format), entry_of(shape.value.format), n_queries,
                            shape.head_dim, shape.key.scale);
}

void check_kv_arithmetic(const PagedKvShape& shape) {
  if (shape.arithmetic == Arithmetic::exact) return;
  const FormatInfo& key = entry_of(shape.key.format);
  const FormatInfo& value = entry_of(shape.value.format);
  const std::string why = arithmetic_refusal(shape.arithmetic, key, value);
  if (!why.empty()) throw_usage_error("GPU paged KV: @engine=" + std::string(arithmetic_name(shape.arithmetic)) + ": " + why);
  // The engine path reads whole rows token by token (what the engines' caches are), as the
  // CPU's engine attention does.
  for (const FormatInfo* f : {&key, &value})
    if (f->gpu != GpuStorage::rows)
      throw_usage_error("GPU paged KV: @engine=" + std::string(arithmetic_name(shape.arithmetic)) + " reads per-token rows; " +
                        std::string(f->name) + " is stored otherwise");
}

}  // namespace kvgate::kernels::gpu
