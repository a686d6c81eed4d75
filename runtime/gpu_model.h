#pragma once
// The forward pass of runtime/model.h on a GPU (built with KVGATE_CUDA or KVGATE_HIP): the same
// Llama decoder, weights uploaded once in their stored GGUF type (repacked into 16-byte planes,
// kernels/gpu/weight_planes.h; the GEMV/GEMM kernels decode them as they load them, to the very
// floats the CPU decodes), activations on the device, and each layer's K/V in kernels/gpu's
// paged device cache in the format under test, attended by the fused kernels that read the
// quantized pages. Logits come back to the host. A forward queues its work and waits for the
// device once, for the logits (the matmul flag of the exact path rides on that wait).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/gpu_ops.h"
#include "kernels/kv_config.h"
#include "runtime/backend.h"
#include "runtime/model.h"

namespace kvgate::runtime {

// The device cache shape of `config` at `layer`: both sides must be formats with GPU kernels
// (kernels/gpu/kv_rows.h) with options those kernels take; the config's engine comes along
// (its attention arithmetic runs on the device). Throws Error (usage) naming the config and
// listing the GPU formats otherwise.
kernels::gpu::PagedKvShape gpu_kv_shape(const kernels::KvConfig& config, const ModelArch& arch, int layer);

// The device weight type of a GGUF weight type (every type the CPU runtime multiplies with has
// one); throws Error (usage) naming `tensor` otherwise.
kernels::gpu::WeightType gpu_weight_type(GgmlType type, const std::string& tensor);

// What GpuModel::upload takes from a model: its shape and host views of its weights, read during
// the upload only. upload(const Model&) gathers them; tests/runtime builds one for a shape
// without a file (its recording stub of kernels/gpu never reads the bytes).
struct GpuModelSource {
  ModelArch arch;
  int n_rot = 0;
  const WeightMatrix* token_embedding = nullptr;
  const WeightMatrix* output = nullptr;  // the same object as token_embedding when tied
  const std::vector<float>* output_norm = nullptr;
  const std::vector<float>* rope_inv_freq = nullptr;
  const std::vector<LayerWeights>* layers = nullptr;
};

// One sequence's KV cache on the device: one paged cache per layer.
class GpuSequence {
 public:
  int64_t length() const;
  int64_t capacity() const { return capacity_; }
  // Forgets tokens from position n on, so a probe can run ahead and step back.
  void truncate(int64_t n);
  // A new sequence holding the first n tokens of this one (capacity: this one's).
  std::unique_ptr<GpuSequence> fork(int64_t n) const;

 private:
  friend class GpuModel;
  std::vector<std::unique_ptr<kernels::gpu::DevicePagedKv>> layers_;
  std::vector<kernels::gpu::PagedKvShape> shapes_;
  int64_t capacity_ = 0;
  kernels::Arithmetic arithmetic_ = kernels::Arithmetic::exact;  // the config's: llama.cpp also rounds matmul inputs
};

class GpuModel {
 public:
  // Uploads every weight of `model` as stored (norms and RoPE frequencies as float32); the model
  // must outlive nothing here (everything needed is copied). Throws Error (environment) on a
  // device failure.
  static std::unique_ptr<GpuModel> upload(const Model& model);
  static std::unique_ptr<GpuModel> upload(const GpuModelSource& source);

  const ModelArch& arch() const { return arch_; }
  uint64_t device_weight_bytes() const { return device_weight_bytes_; }

  std::unique_ptr<GpuSequence> start(const kernels::KvConfig& config, int64_t max_tokens) const;

  // Runs `tokens` at positions [seq.length(), +n), appending their K/V in every layer; logits
  // (host memory): [n][n_vocab] when all_logits, else [1][n_vocab] for the last token. Waits
  // for the device once, when the logits come back; should the exact path's matmul flag be
  // raised (a value f16 pieces cannot hold), the pass is redone on f32 matmuls from the same
  // cache position, so the result is never a rounded infinity.
  void forward(GpuSequence& seq, std::span<const int32_t> tokens, bool all_logits, float* logits) const;

 private:
  using Weight = kernels::gpu::UploadedWeight;
  void run(GpuSequence& seq, std::span<const int32_t> tokens, bool all_logits, float* logits,
           kernels::gpu::MatmulPath path) const;
  struct Layer {
    kernels::gpu::DeviceMemory attn_norm, ffn_norm;
    Weight wq, wk, wv, wo, w_gate, w_up, w_down;
  };
  GpuModel() = default;
  // `bytes`: the matrix's data as uploaded, when not w.data (Q/K rows reordered).
  static Weight upload_weight(const WeightMatrix& w, uint64_t& total, const uint8_t* bytes = nullptr);
  // Token ids on their way to ids_ (pinned, sized at upload so no forward waits to grow it).
  mutable kernels::gpu::PinnedHost staging_;

  ModelArch arch_;
  int n_rot_ = 0;
  Weight token_embd_, output_;
  kernels::gpu::DeviceMemory output_norm_, rope_inv_freq_;
  bool tied_output_ = false;
  std::vector<Layer> layers_;
  uint64_t device_weight_bytes_ = 0;
  // Activation buffers, grown to the largest chunk seen (forward is not reentrant).
  mutable kernels::gpu::DeviceMemory ids_, x_, xn_, q_, k_, v_, att_, gate_, up_, logits_;
};

// The Backend (runtime/backend.h) over a GpuModel uploaded from `model`; name() is the vendor
// ("cuda" or "hip") and device() the GPU's name. Throws Error (environment) without a device.
std::unique_ptr<Backend> make_gpu_backend(const Model& model);

}  // namespace kvgate::runtime
