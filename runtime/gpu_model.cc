#include "runtime/gpu_model.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "core/error.h"
#include "kernels/gpu/gpu_convert.h"
#include "kernels/gpu/tq_params.h"
#include "kernels/hadamard.h"
#include "kernels/kv_format.h"

namespace kvgate::runtime {
namespace {

namespace gpu = kernels::gpu;

constexpr int kGpuPageTokens = 32;  // as Model::make_cache

std::string gpu_format_list() {
  std::string names;
  for (kernels::FormatId f : gpu::kv_formats()) names += std::string(names.empty() ? "" : ", ") + gpu::kv_format_name(f);
  return names;
}

// The GPU side of one config side: the registry entry says how the GPU keeps the format, and the
// spec's options must be ones the kernels take at this head_dim.
gpu::KvSideFormat gpu_side(const kernels::KvConfig& config, const kernels::FormatSpec& spec, const char* side,
                           int head_dim) {
  const kernels::FormatInfo& f = *spec.format;
  gpu::KvSideFormat out;
  bool ok = true;
  switch (f.gpu) {
    case kernels::GpuStorage::none: ok = false; break;
    case kernels::GpuStorage::turboquant:
      out.tq = gpu::make_tq_params(f.id, head_dim, spec.options);
      ok = out.tq.has_value();
      break;
    case kernels::GpuStorage::windowed: {
      kernels::FormatOptions plain;
      plain.token_group = spec.options.token_group;
      plain.residual_tokens = spec.options.residual_tokens;
      out.group = spec.options.token_group;
      out.residual = spec.options.residual_tokens;
      const int group = out.group > 0 ? out.group : gpu::kKiviDefaultGroup;
      ok = spec.options == plain && kGpuPageTokens % group == 0;
      break;
    }
    case kernels::GpuStorage::rows: {
      // llama.cpp's rot=wht is skipped where head_dim % 64 != 0 (the CPU codec does the same).
      const bool wht_skipped = spec.options.rotation == kernels::Rotation::wht &&
                               kernels::wht_rotation_block(head_dim, spec.options.rotation_block) == 0;
      if (spec.options.rotation != kernels::Rotation::none && !wht_skipped) {
        if (f.accepts(kernels::kOptionRotation)) out.rotation = gpu::make_rotation_params(head_dim, spec.options);
        ok = out.rotation.has_value();
      } else {
        kernels::FormatOptions plain;
        plain.scale = spec.options.scale;
        plain.rotation = spec.options.rotation;
        plain.rotation_block = spec.options.rotation_block;
        ok = spec.options == plain && (spec.options.scale == 1.0f || f.accepts(kernels::kOptionScale));
      }
      break;
    }
  }
  if (!ok)
    throw_usage_error("KV config " + config.canonical() + ": the GPU backend has no kernel for the " + side +
                      " format " + spec.canonical() + " (GPU formats: " + gpu_format_list() +
                      "; fp8_* and nvfp4 take :scale=, tq{b} take :nc, :seed=, :outliers= and :rot=qr (tqprod{b} :seed= and "
                      ":rot=qr) with a head_dim up to 256, a power of two unless rot=qr, the ggml blocks take :rot=wht, "
                      ":rot=hadamard and :seed= with a head_dim up to 256 (a power of two for hadamard), "
                      "kivi* take residual= and a group= dividing 32; others take "
                      "no options)");
  out.format = f.id;
  out.scale = spec.options.scale;
  return out;
}

gpu::DeviceMemory upload_floats(const std::vector<float>& host) {
  gpu::DeviceMemory d(host.size() * sizeof(float));
  d.upload(host.data(), host.size() * sizeof(float));
  return d;
}

}  // namespace

gpu::WeightType gpu_weight_type(GgmlType type, const std::string& tensor) {
  switch (type) {
    case GgmlType::F32: return gpu::WeightType::f32;
    case GgmlType::F16: return gpu::WeightType::f16;
    case GgmlType::BF16: return gpu::WeightType::bf16;
    case GgmlType::Q4_0: return gpu::WeightType::q4_0;
    case GgmlType::Q4_1: return gpu::WeightType::q4_1;
    case GgmlType::Q5_0: return gpu::WeightType::q5_0;
    case GgmlType::Q5_1: return gpu::WeightType::q5_1;
    case GgmlType::Q8_0: return gpu::WeightType::q8_0;
    case GgmlType::Q4_K: return gpu::WeightType::q4_k;
    case GgmlType::Q6_K: return gpu::WeightType::q6_k;
    default: break;
  }
  throw_usage_error("tensor '" + tensor + "' has weight type " + ggml_type_name(type) +
                    ", which the GPU backend does not multiply with");
}

// The matrix's bytes as stored ([rows][row_bytes], row-major as ggml stores it), repacked into
// the device's planes.
GpuModel::Weight GpuModel::upload_weight(const WeightMatrix& w, uint64_t& total, const uint8_t* bytes_override) {
  const gpu::WeightType type = gpu_weight_type(w.type, w.name);
  const int64_t block_elems = gpu::weight_block_elems(type);
  if (w.rows > std::numeric_limits<int>::max() || w.cols > std::numeric_limits<int>::max() ||
      w.cols % block_elems != 0 ||
      w.row_bytes != static_cast<size_t>(w.cols / block_elems) * static_cast<size_t>(gpu::weight_block_bytes(type)))
    throw_usage_error("tensor '" + w.name + "': a " + std::to_string(w.rows) + " x " + std::to_string(w.cols) + " " +
                      ggml_type_name(w.type) + " matrix the GPU kernels cannot address");
  total += static_cast<uint64_t>(w.rows) * w.row_bytes;
  return gpu::upload_weight(type, bytes_override ? bytes_override : w.data, static_cast<int>(w.rows), static_cast<int>(w.cols), w.row_bytes);
}

gpu::PagedKvShape gpu_kv_shape(const kernels::KvConfig& config, const ModelArch& arch, int layer) {
  const int n_layers = static_cast<int>(arch.n_layers);
  gpu::PagedKvShape shape;
  shape.head_dim = static_cast<int>(arch.head_dim);
  shape.n_kv_heads = static_cast<int>(arch.n_kv_heads);
  shape.page_tokens = kGpuPageTokens;
  shape.key = gpu_side(config, config.key_for_layer(layer, n_layers), "key", shape.head_dim);
  shape.value = gpu_side(config, config.value_for_layer(layer, n_layers), "value", shape.head_dim);
  // The engine's attention arithmetic runs on the device too (kernels/gpu/gpu_attention_arithmetic.cu).
  shape.arithmetic = config.arithmetic;
  return shape;
}

int64_t GpuSequence::length() const { return layers_.empty() ? 0 : layers_.front()->length(); }

void GpuSequence::truncate(int64_t n) {
  for (auto& layer : layers_) layer->truncate(static_cast<int>(n));
}

std::unique_ptr<GpuSequence> GpuSequence::fork(int64_t n) const {
  auto copy = std::make_unique<GpuSequence>();
  copy->capacity_ = capacity_;
  copy->shapes_ = shapes_;
  copy->arithmetic_ = arithmetic_;
  for (size_t l = 0; l < layers_.size(); ++l) {
    copy->layers_.push_back(std::make_unique<gpu::DevicePagedKv>(shapes_[l], static_cast<int>(capacity_)));
    copy->layers_.back()->copy_prefix_from(*layers_[l], static_cast<int>(n));
  }
  return copy;
}

std::unique_ptr<GpuModel> GpuModel::upload(const Model& model) {
  GpuModelSource source;
  source.arch = model.arch();
  source.n_rot = static_cast<int>(model.rope_inv_freq().size() * 2);
  source.token_embedding = &model.token_embedding();
  source.output = model.output().data == model.token_embedding().data ? &model.token_embedding() : &model.output();
  source.output_norm = &model.output_norm();
  source.rope_inv_freq = &model.rope_inv_freq();
  source.layers = &model.layers();
  return upload(source);
}

std::unique_ptr<GpuModel> GpuModel::upload(const GpuModelSource& source) {
  std::unique_ptr<GpuModel> g(new GpuModel());
  g->arch_ = source.arch;
  g->n_rot_ = source.n_rot;
  uint64_t& total = g->device_weight_bytes_;
  g->token_embd_ = upload_weight(*source.token_embedding, total);
  g->tied_output_ = source.output == source.token_embedding;
  if (!g->tied_output_) g->output_ = upload_weight(*source.output, total);
  g->output_norm_ = upload_floats(*source.output_norm);
  g->rope_inv_freq_ = upload_floats(*source.rope_inv_freq);
  for (const LayerWeights& w : *source.layers) {
    Layer l;
    l.attn_norm = upload_floats(w.attn_norm);
    if (source.arch.rope_layout == RopeLayout::halves) {
      // The kernels rotate adjacent pairs: a Hugging Face Llama's Q/K rows are reordered once here.
      const int head_dim = static_cast<int>(source.arch.head_dim);
      l.wq = upload_weight(w.wq, total, rows_for_adjacent_pairs(w.wq, head_dim).data());
      l.wk = upload_weight(w.wk, total, rows_for_adjacent_pairs(w.wk, head_dim).data());
    } else {
      l.wq = upload_weight(w.wq, total);
      l.wk = upload_weight(w.wk, total);
    }
    l.wv = upload_weight(w.wv, total);
    l.wo = upload_weight(w.wo, total);
    l.ffn_norm = upload_floats(w.ffn_norm);
    l.w_gate = upload_weight(w.w_gate, total);
    l.w_up = upload_weight(w.w_up, total);
    l.w_down = upload_weight(w.w_down, total);
    g->layers_.push_back(std::move(l));
  }
  // Token ids of chunks up to this size go up without a wait; a longer chunk regrows it (once).
  g->staging_.reserve(size_t{1} << 16);
  gpu::device_synchronize();
  return g;
}

std::unique_ptr<GpuSequence> GpuModel::start(const kernels::KvConfig& config, int64_t max_tokens) const {
  if (max_tokens < 1 || max_tokens > (int64_t{1} << 30))
    throw_usage_error("GPU sequence capacity must be 1..2^30 tokens, got " + std::to_string(max_tokens));
  auto seq = std::make_unique<GpuSequence>();
  seq->capacity_ = max_tokens;
  seq->arithmetic_ = config.arithmetic;
  for (int l = 0; l < static_cast<int>(arch_.n_layers); ++l) {
    seq->shapes_.push_back(gpu_kv_shape(config, arch_, l));
    seq->layers_.push_back(std::make_unique<gpu::DevicePagedKv>(seq->shapes_.back(), static_cast<int>(max_tokens)));
  }
  return seq;
}

void GpuModel::forward(GpuSequence& seq, std::span<const int32_t> tokens, bool all_logits, float* logits) const {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) return;
  const int V = static_cast<int>(arch_.n_vocab);
  for (int32_t t : tokens)
    if (t < 0 || t >= V)
      throw_input_error("token id " + std::to_string(t) + " is outside the vocabulary (0.." + std::to_string(V - 1) + ")");
  if (seq.length() + n > seq.capacity())
    throw_usage_error("GPU sequence: " + std::to_string(n) + " tokens do not fit after " + std::to_string(seq.length()) +
                      " of capacity " + std::to_string(seq.capacity()));
  // Exact arithmetic: tensor cores on 16-bit pieces. llama.cpp (CPU): f32 products of inputs
  // rounded as ggml-cpu rounds them. The CUDA engines: one 16-bit GEMM of the rounded inputs.
  const gpu::MatmulPath path = seq.arithmetic_ == kernels::Arithmetic::exact       ? gpu::MatmulPath::exact
                               : seq.arithmetic_ == kernels::Arithmetic::llama_cpp ? gpu::MatmulPath::f32
                                                                                   : gpu::MatmulPath::sixteen_bit;
  const int64_t pos0 = seq.length();
  run(seq, tokens, all_logits, logits, path);
  // The flag came back with the logits (one wait for both). Raised, the pass is redone in f32
  // from the same position: the chunk's K/V are rewritten, nothing else has changed.
  if (path == gpu::MatmulPath::exact && gpu::matmul_flag_raised()) {
    seq.truncate(pos0);
    run(seq, tokens, all_logits, logits, gpu::MatmulPath::f32);
  }
}

void GpuModel::run(GpuSequence& seq, std::span<const int32_t> tokens, bool all_logits, float* logits,
                   gpu::MatmulPath path) const {
  const int n = static_cast<int>(tokens.size());
  const int E = static_cast<int>(arch_.n_embd), H = static_cast<int>(arch_.n_heads);
  const int KV = static_cast<int>(arch_.n_kv_heads), D = static_cast<int>(arch_.head_dim);
  const int F = static_cast<int>(arch_.n_ff), V = static_cast<int>(arch_.n_vocab);
  const int64_t pos0 = seq.length();
  const size_t f = sizeof(float);
  // Stream-ordered growth: none of these waits for the device.
  ids_.reserve(static_cast<size_t>(n) * sizeof(int32_t));
  x_.reserve(static_cast<size_t>(n) * E * f);
  xn_.reserve(static_cast<size_t>(n) * E * f);
  q_.reserve(static_cast<size_t>(n) * H * D * f);
  k_.reserve(static_cast<size_t>(n) * KV * D * f);
  v_.reserve(static_cast<size_t>(n) * KV * D * f);
  att_.reserve(static_cast<size_t>(n) * H * D * f);
  gate_.reserve(static_cast<size_t>(n) * F * f);
  up_.reserve(static_cast<size_t>(n) * F * f);

  // The previous forward's wait for its logits also finished its upload from staging_.
  staging_.reserve(tokens.size() * sizeof(int32_t));
  std::memcpy(staging_.data(), tokens.data(), tokens.size() * sizeof(int32_t));
  ids_.upload_async(staging_, tokens.size() * sizeof(int32_t));
  if (path == gpu::MatmulPath::exact) gpu::matmul_flag_reset();
  gpu::gather_rows(token_embd_.view, ids_.ints(), n, x_.floats());
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
  // Engines round matmul inputs (weight_blocks.h arithmetic_dot_input), as Model::forward does on the
  // CPU (same buffers, same points). Every buffer rounded here is read only by the matmuls that
  // follow, which must round it alike.
  const kernels::Arithmetic arithmetic = seq.arithmetic_;
  const auto dot_input = [&](const Weight& w) { return gpu::arithmetic_dot_input(arithmetic, w.view.type); };
  const auto round_input = [&](const Weight& w, float* in, int rows) {
    gpu::round_matmul_input(dot_input(w), w.view, in, rows);
  };
  // accumulate: out += x . w^T (the residual adds ride on the matmul).
  const auto matmul = [&](const float* in, int rows, const Weight& w, float* out, bool accumulate = false) {
    gpu::matmul(path, in, rows, w.view, out, accumulate);
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& w = layers_[l];
    gpu::rms_norm_rows(x_.floats(), n, E, w.attn_norm.floats(), arch_.rms_eps, xn_.floats());
    KVGATE_CHECK(dot_input(w.wk) == dot_input(w.wq) && dot_input(w.wv) == dot_input(w.wq),
                 "engine input rounding: Q, K and V weights whose inputs the engine rounds differently");
    round_input(w.wq, xn_.floats(), n);
    {
      const gpu::DeviceWeight* qkv[] = {&w.wq.view, &w.wk.view, &w.wv.view};
      float* out[] = {q_.floats(), k_.floats(), v_.floats()};
      gpu::matmul_many(path, xn_.floats(), n, 3, qkv, out);
    }
    gpu::rope_pairs(q_.floats(), H, k_.floats(), KV, n, D, n_rot_, pos0, rope_inv_freq_.floats());
    // Keys are quantized after RoPE and the chunk attends to its own quantized K/V, as on the CPU.
    seq.layers_[l]->append_device(k_.floats(), v_.floats(), n);
    seq.layers_[l]->attention_device(H, q_.floats(), n, softmax_scale, att_.floats());
    round_input(w.wo, att_.floats(), n);
    matmul(att_.floats(), n, w.wo, x_.floats(), true);

    gpu::rms_norm_rows(x_.floats(), n, E, w.ffn_norm.floats(), arch_.rms_eps, xn_.floats());
    KVGATE_CHECK(dot_input(w.w_up) == dot_input(w.w_gate),
                 "engine input rounding: gate and up weights whose inputs the engine rounds differently");
    round_input(w.w_gate, xn_.floats(), n);
    {
      const gpu::DeviceWeight* gate_up[] = {&w.w_gate.view, &w.w_up.view};
      float* out[] = {gate_.floats(), up_.floats()};
      gpu::matmul_many(path, xn_.floats(), n, 2, gate_up, out);
    }
    gpu::silu_mul(gate_.floats(), up_.floats(), static_cast<size_t>(n) * F);
    round_input(w.w_down, gate_.floats(), n);
    matmul(gate_.floats(), n, w.w_down, x_.floats(), true);
  }
  const int first = all_logits ? 0 : n - 1;
  const int rows = n - first;
  logits_.reserve(static_cast<size_t>(rows) * V * f);
  gpu::rms_norm_rows(x_.floats() + static_cast<size_t>(first) * E, rows, E, output_norm_.floats(), arch_.rms_eps,
                     xn_.floats());
  const Weight& head = tied_output_ ? token_embd_ : output_;
  round_input(head, xn_.floats(), rows);
  matmul(xn_.floats(), rows, head, logits_.floats());
  if (path == gpu::MatmulPath::exact) gpu::matmul_flag_fetch();
  logits_.download(logits, static_cast<size_t>(rows) * V * f);  // the forward's one wait
}

namespace {

class GpuBackendSequence final : public BackendSequence {
 public:
  explicit GpuBackendSequence(std::unique_ptr<GpuSequence> seq) : seq_(std::move(seq)) {}
  int64_t length() const override { return seq_->length(); }
  std::unique_ptr<BackendSequence> fork(int64_t n) override {
    return std::make_unique<GpuBackendSequence>(seq_->fork(n));
  }
  GpuSequence& sequence() { return *seq_; }

 private:
  std::unique_ptr<GpuSequence> seq_;
};

class GpuBackend final : public Backend {
 public:
  explicit GpuBackend(const Model& model) {
    if (gpu::device_count() == 0)
      throw_environment_error(std::string("--backend ") + gpu::vendor() + ": no " + gpu::vendor() +
                              " device is visible (check the driver, and CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES)");
    model_ = GpuModel::upload(model);
    device_ = gpu::device_name();
  }
  std::string name() const override { return gpu::vendor(); }
  std::string device() const override { return device_; }
  const ModelArch& arch() const override { return model_->arch(); }
  uint64_t weight_bytes() const override { return model_->device_weight_bytes(); }
  std::unique_ptr<BackendSequence> start(const kernels::KvConfig& config, int64_t max_tokens) override {
    return std::make_unique<GpuBackendSequence>(model_->start(config, max_tokens));
  }
  void forward(BackendSequence& seq, std::span<const int32_t> tokens, bool all_logits, float* logits) override {
    auto* g = dynamic_cast<GpuBackendSequence*>(&seq);
    if (!g) throw_usage_error("GPU backend: a sequence from another backend");
    model_->forward(g->sequence(), tokens, all_logits, logits);
  }

 private:
  std::unique_ptr<GpuModel> model_;
  std::string device_;
};

}  // namespace

std::unique_ptr<Backend> make_gpu_backend(const Model& model) { return std::make_unique<GpuBackend>(model); }

}  // namespace kvgate::runtime
