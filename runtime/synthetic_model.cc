#include "runtime/synthetic_model.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/float_convert.h"
#include "core/hash.h"
#include "core/mapped_file.h"
#include "core/rng.h"
#include "runtime/gguf_writer.h"
#include "runtime/hf_checkpoint.h"
#include "runtime/hf_tokenizer.h"
#include "runtime/safetensors.h"

#include <nlohmann/json.hpp>

namespace kvgate::runtime {
namespace {

const SyntheticShape kShapes[] = {
    // name, arch, layers, embd, heads, kv heads, ffn, context, rope base, rms eps
    {"tiny", "llama", 2, 256, 4, 2, 512, 4096, 10000.0f, 1e-5f},
    {"llama-3.2-1b", "llama", 16, 2048, 32, 8, 8192, 131072, 500000.0f, 1e-5f},
    {"llama-3.1-8b", "llama", 32, 4096, 32, 8, 14336, 131072, 500000.0f, 1e-5f},
    {"llama-3.1-70b", "llama", 80, 8192, 64, 8, 28672, 131072, 500000.0f, 1e-5f},
    {"qwen2.5-7b", "qwen2", 28, 3584, 28, 4, 18944, 32768, 1000000.0f, 1e-6f},
    {"qwen3-8b", "qwen3", 36, 4096, 32, 8, 12288, 40960, 1000000.0f, 1e-6f},
};

std::string shape_list() {
  std::string s;
  for (const SyntheticShape& sh : kShapes) s += (s.empty() ? "" : ", ") + sh.name;
  return s;
}

// One tensor's bytes: every block gets the tensor's fixed scale field(s) and random codes.
// The scales put the weights' standard deviation near 1/sqrt(cols), so activations stay in
// range through dozens of layers and the forward pass does real (finite) arithmetic.
class TensorFiller {
 public:
  TensorFiller(GgmlType type, uint64_t cols, uint64_t stream) : type_(type), rng_(stream) {
    const float sigma = static_cast<float>(1.0 / std::sqrt(static_cast<double>(cols)));
    switch (type) {
      case GgmlType::F32:  // norms: ones
        break;
      case GgmlType::F16:
      case GgmlType::BF16:
        // 256 evenly spaced values of U(-sqrt(3) sigma, sqrt(3) sigma), one random byte each.
        for (int k = 0; k < 256; ++k) {
          const float v = static_cast<float>((k + 0.5) / 256.0 * 2.0 - 1.0) * std::sqrt(3.0f) * sigma;
          f16_table_[static_cast<size_t>(k)] = type == GgmlType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
        }
        break;
      case GgmlType::Q8_0: d_ = f32_to_f16(sigma / 73.0f); break;   // codes ~U(-127, 127): sd 73
      case GgmlType::Q4_0: d_ = f32_to_f16(sigma / 4.6f); break;    // codes ~U(-8, 7): sd 4.6
      case GgmlType::Q4_K:                                           // scales ~U(0, 63), codes ~U(0, 15)
        d_ = f32_to_f16(sigma / 150.0f);
        dmin_ = f32_to_f16(sigma / 150.0f * 7.5f);
        break;
      default: throw_internal_error("synthetic weights of an unsupported type");
    }
  }

  void fill(std::span<uint8_t> out) {
    uint8_t* p = out.data();
    const size_t n = out.size();
    switch (type_) {
      case GgmlType::F32:
        for (size_t i = 0; i < n; i += 4) std::memcpy(p + i, &kOne, 4);
        return;
      case GgmlType::F16:
      case GgmlType::BF16:
        for (size_t i = 0; i < n; i += 16) {
          uint64_t r = rng_.next_u64();
          for (size_t k = 0; k < 16 && i + k < n; k += 2, r >>= 8) std::memcpy(p + i + k, &f16_table_[r & 0xff], 2);
        }
        return;
      case GgmlType::Q8_0:
        for (size_t b = 0; b < n; b += 34) {
          std::memcpy(p + b, &d_, 2);
          random_bytes(p + b + 2, 32);
          // -128 is a code ggml's quantizer never writes (and SIMD dots negate codes).
          for (size_t k = 2; k < 34; ++k)
            if (p[b + k] == 0x80) p[b + k] = 0x81;
        }
        return;
      case GgmlType::Q4_0:
        for (size_t b = 0; b < n; b += 18) {
          std::memcpy(p + b, &d_, 2);
          random_bytes(p + b + 2, 16);
        }
        return;
      case GgmlType::Q4_K:
        for (size_t b = 0; b < n; b += 144) {
          std::memcpy(p + b, &d_, 2);
          std::memcpy(p + b + 2, &dmin_, 2);
          random_bytes(p + b + 4, 140);  // every bit pattern of the 6-bit scales and minima is valid
        }
        return;
      default: return;
    }
  }

 private:
  void random_bytes(uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
      const uint64_t r = rng_.next_u64();
      std::memcpy(p + i, &r, std::min<size_t>(8, n - i));
    }
  }
  static constexpr float kOne = 1.0f;
  GgmlType type_;
  Rng rng_;
  uint16_t d_ = 0, dmin_ = 0;
  std::array<uint16_t, 256> f16_table_{};
};

}  // namespace

std::span<const SyntheticShape> synthetic_shapes() { return kShapes; }

SyntheticShape parse_synthetic_shape(const std::string& spec) {
  std::string name = spec;
  std::optional<uint32_t> layers;
  if (const size_t at = spec.find("-layers="); at != std::string::npos) {
    name = spec.substr(0, at);
    const std::string n = spec.substr(at + 8);
    uint64_t v = 0;
    bool ok = !n.empty() && n.size() <= 6;
    for (char c : n) ok = ok && c >= '0' && c <= '9';
    if (ok) v = std::stoull(n);
    if (!ok || v == 0) throw_usage_error("--shape " + spec + ": '-layers=' takes a positive layer count");
    layers = static_cast<uint32_t>(v);
  }
  for (const SyntheticShape& s : kShapes) {
    if (s.name != name) continue;
    SyntheticShape out = s;
    if (layers) {
      if (*layers > s.n_layers)
        throw_usage_error("--shape " + spec + ": " + s.name + " has " + std::to_string(s.n_layers) + " layers");
      out.n_layers = *layers;
      out.name = spec;
    }
    return out;
  }
  throw_usage_error("--shape " + spec + ": unknown shape (shapes: " + shape_list() + "; NAME-layers=N keeps the first N layers)");
}

GgmlType parse_synthetic_weights(const std::string& name) {
  if (name == "f16") return GgmlType::F16;
  if (name == "bf16") return GgmlType::BF16;
  if (name == "q8_0") return GgmlType::Q8_0;
  if (name == "q4_0") return GgmlType::Q4_0;
  if (name == "q4_k") return GgmlType::Q4_K;
  throw_usage_error("--weights " + name + ": synthetic weights are f16, bf16, q8_0, q4_0 or q4_k");
}

bool is_synthetic(const GgufFile& file) { return file.get_bool(kSyntheticKey).value_or(false); }

SyntheticSummary write_synthetic_model(const SyntheticModel& m, const std::string& out) {
  const SyntheticShape& s = m.shape;
  const GgufFile tok = GgufFile::open(m.tokenizer_from);
  const GgufArray* tokens = tok.get_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->element_type != GgufValueType::string)
    throw_input_error(m.tokenizer_from + ": no tokenizer (metadata key 'tokenizer.ggml.tokens') to give the synthetic model");
  const uint64_t vocab = tokens->count;
  const uint64_t head_dim = s.n_embd / s.n_heads;

  GgufWriter w;
  const std::string a = s.arch + ".";
  w.add_string("general.architecture", s.arch);
  w.add_string("general.name", "synthetic " + s.name);
  w.add_bool(kSyntheticKey, true);
  w.add_string("kvgate.synthetic.shape", s.name);
  w.add_string("kvgate.synthetic.weights", ggml_type_name(m.weights));
  w.add_u32("kvgate.synthetic.seed", m.seed);
  w.add_string("kvgate.synthetic.tokenizer", std::filesystem::path(m.tokenizer_from).filename().string());
  w.add_u32(a + "block_count", s.n_layers);
  w.add_u32(a + "context_length", s.n_ctx);
  w.add_u32(a + "embedding_length", s.n_embd);
  w.add_u32(a + "feed_forward_length", s.n_ff);
  w.add_u32(a + "attention.head_count", s.n_heads);
  w.add_u32(a + "attention.head_count_kv", s.n_kv_heads);
  w.add_u32(a + "attention.key_length", static_cast<uint32_t>(head_dim));
  w.add_u32(a + "attention.value_length", static_cast<uint32_t>(head_dim));
  w.add_u32(a + "rope.dimension_count", static_cast<uint32_t>(head_dim));
  w.add_f32(a + "rope.freq_base", s.rope_base);
  w.add_f32(a + "attention.layer_norm_rms_epsilon", s.rms_eps);
  for (const auto& [key, value] : tok.metadata())
    if (key.rfind("tokenizer.", 0) == 0) w.copy_value(key, value);

  // Each tensor's stream is seeded by its name; `rows_of` keeps its type and row length.
  std::vector<std::string> names;
  std::vector<std::pair<GgmlType, uint64_t>> rows_of;
  const auto add = [&](const std::string& name, GgmlType type, std::vector<uint64_t> dims) {
    names.push_back(name);
    rows_of.emplace_back(type, dims[0]);
    w.add_tensor(name, type, std::move(dims));
  };
  const GgmlType wt = m.weights;
  const uint64_t E = s.n_embd, F = s.n_ff, Q = s.n_heads * head_dim, KV = s.n_kv_heads * head_dim;
  add("token_embd.weight", wt, {E, vocab});
  add("output_norm.weight", GgmlType::F32, {E});
  add("output.weight", wt, {E, vocab});
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", GgmlType::F32, {E});
    add(p + "attn_q.weight", wt, {E, Q});
    add(p + "attn_k.weight", wt, {E, KV});
    add(p + "attn_v.weight", wt, {E, KV});
    add(p + "attn_output.weight", wt, {Q, E});
    if (s.arch == "qwen3") {
      add(p + "attn_q_norm.weight", GgmlType::F32, {head_dim});
      add(p + "attn_k_norm.weight", GgmlType::F32, {head_dim});
    }
    add(p + "ffn_norm.weight", GgmlType::F32, {E});
    add(p + "ffn_gate.weight", wt, {E, F});
    add(p + "ffn_up.weight", wt, {E, F});
    add(p + "ffn_down.weight", wt, {F, E});
  }

  std::unique_ptr<TensorFiller> filler;
  w.write(out, [&](size_t t, uint64_t offset, std::span<uint8_t> bytes) {
    if (offset == 0)
      filler = std::make_unique<TensorFiller>(rows_of[t].first, rows_of[t].second, xxhash64(names[t], m.seed));
    filler->fill(bytes);
  });

  SyntheticSummary r;
  r.file_bytes = std::filesystem::file_size(out);
  r.weight_bytes = 0;
  for (size_t t = 0; t < names.size(); ++t) r.weight_bytes += w.tensor_bytes(t);
  r.n_vocab = static_cast<uint32_t>(vocab);
  r.n_tensors = names.size();
  return r;
}

SyntheticSummary write_synthetic_model_hf(const SyntheticModel& m, const std::string& out_dir) {
  namespace fs = std::filesystem;
  const SyntheticShape& s = m.shape;
  if (m.weights != GgmlType::F16 && m.weights != GgmlType::BF16)
    throw_usage_error(std::string("--format hf writes f16 or bf16 weights (safetensors holds no ggml blocks), not ") +
                      ggml_type_name(m.weights));
  const fs::path from(m.tokenizer_from);
  if (!fs::is_directory(from))
    throw_usage_error(m.tokenizer_from + ": --format hf copies the tokenizer of a Hugging Face directory (tokenizer.json); "
                      "pass --tokenizer DIR");
  const uint64_t vocab = static_cast<uint64_t>(hf_tokenizer(m.tokenizer_from, {}).vocab_size());
  const uint64_t head_dim = s.n_embd / s.n_heads;
  const std::string model_type = s.arch;  // llama, qwen2, qwen3: Hugging Face's names too
  const char* class_name = s.arch == "qwen2" ? "Qwen2ForCausalLM" : s.arch == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
  const bool bf16 = m.weights == GgmlType::BF16;

  nlohmann::json config = {
      {"architectures", {class_name}}, {"model_type", model_type}, {"hidden_size", s.n_embd},
      {"intermediate_size", s.n_ff}, {"num_hidden_layers", s.n_layers}, {"num_attention_heads", s.n_heads},
      {"num_key_value_heads", s.n_kv_heads}, {"head_dim", head_dim}, {"vocab_size", vocab},
      {"max_position_embeddings", s.n_ctx}, {"rms_norm_eps", s.rms_eps}, {"rope_theta", s.rope_base},
      {"hidden_act", "silu"}, {"tie_word_embeddings", false}, {"torch_dtype", bf16 ? "bfloat16" : "float16"},
      {"kvgate_synthetic", {{"shape", s.name}, {"weights", bf16 ? "bf16" : "f16"}, {"seed", m.seed},
                            {"tokenizer", from.filename().string()}}}};

  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> shape;  // row-major
    uint64_t bytes;
  };
  std::vector<Tensor> tensors;
  const auto add = [&](const std::string& runtime_name, GgmlType type, std::vector<uint64_t> shape) {
    uint64_t n = 1;
    for (uint64_t d : shape) n *= d;
    tensors.push_back({hf_tensor_name(runtime_name, model_type), type, std::move(shape), n * (type == GgmlType::F32 ? 4 : 2)});
  };
  const GgmlType wt = m.weights;
  const uint64_t E = s.n_embd, F = s.n_ff, Q = s.n_heads * head_dim, KV = s.n_kv_heads * head_dim;
  add("token_embd.weight", wt, {vocab, E});
  add("output_norm.weight", GgmlType::F32, {E});
  add("output.weight", wt, {vocab, E});
  for (uint32_t l = 0; l < s.n_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", GgmlType::F32, {E});
    add(p + "attn_q.weight", wt, {Q, E});
    add(p + "attn_k.weight", wt, {KV, E});
    add(p + "attn_v.weight", wt, {KV, E});
    add(p + "attn_output.weight", wt, {E, Q});
    if (s.arch == "qwen2") {
      add(p + "attn_q.bias", wt, {Q});
      add(p + "attn_k.bias", wt, {KV});
      add(p + "attn_v.bias", wt, {KV});
    }
    if (s.arch == "qwen3") {
      add(p + "attn_q_norm.weight", GgmlType::F32, {head_dim});
      add(p + "attn_k_norm.weight", GgmlType::F32, {head_dim});
    }
    add(p + "ffn_norm.weight", GgmlType::F32, {E});
    add(p + "ffn_gate.weight", wt, {F, E});
    add(p + "ffn_up.weight", wt, {F, E});
    add(p + "ffn_down.weight", wt, {E, F});
  }

  nlohmann::json header = {{"__metadata__", {{"format", "pt"}}}};
  uint64_t offset = 0;
  for (const Tensor& t : tensors) {
    header[t.name] = {{"dtype", t.type == GgmlType::F32 ? "F32" : bf16 ? "BF16" : "F16"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.bytes}}};
    offset += t.bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned

  const fs::path tmp = fs::path(out_dir + ".partial");
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw_environment_error(out_dir + ": cannot create " + tmp.string() + ": " + ec.message());
  write_output_file((tmp / "config.json").string(), config.dump(2) + "\n");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"})
    if (fs::exists(from / f)) {
      fs::copy_file(from / f, tmp / f, fs::copy_options::overwrite_existing, ec);
      if (ec) throw_environment_error((tmp / f).string() + ": cannot copy " + (from / f).string() + ": " + ec.message());
    }
  {
    const std::string path = (tmp / "model.safetensors").string();
    std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    if (!f) throw_environment_error(path + ": cannot open for writing");
    const uint64_t n = header_text.size();
    bool ok = std::fwrite(&n, 8, 1, f.get()) == 1 && std::fwrite(header_text.data(), 1, n, f.get()) == n;
    std::vector<uint8_t> chunk;
    for (const Tensor& t : tensors) {
      // Row length as the GGUF writer's filler sees it, so weights have the same scale.
      TensorFiller filler(t.type, t.shape.back(), xxhash64(t.name, m.seed));
      for (uint64_t done = 0; done < t.bytes && ok;) {
        const uint64_t len = std::min<uint64_t>(t.bytes - done, uint64_t{1} << 24);
        chunk.resize(static_cast<size_t>(len));
        filler.fill(chunk);
        ok = std::fwrite(chunk.data(), 1, chunk.size(), f.get()) == chunk.size();
        done += len;
      }
    }
    if (!ok || std::fflush(f.get()) != 0) throw_environment_error(path + ": write failed (disk full?)");
  }
  fs::remove_all(out_dir, ec);
  fs::rename(tmp, out_dir, ec);
  if (ec) throw_environment_error(out_dir + ": cannot rename the finished directory into place: " + ec.message());

  SyntheticSummary r;
  r.file_bytes = fs::file_size(fs::path(out_dir) / "model.safetensors");
  for (const Tensor& t : tensors) r.weight_bytes += t.bytes;
  r.n_vocab = static_cast<uint32_t>(vocab);
  r.n_tensors = tensors.size();
  return r;
}

}  // namespace kvgate::runtime
