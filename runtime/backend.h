#pragma once
// Where a forward pass runs: the CPU runtime (runtime/model.h) or, in a GPU build, the device
// (runtime/gpu_model.h, make_gpu_backend). The harness drives eval, replay, perplexity, generate
// and bench through this interface, so they take --backend and a CPU run computes exactly what
// it computed before the interface existed.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "kernels/kv_config.h"
#include "runtime/model.h"

namespace kvgate::runtime {

// One sequence's KV cache on a backend.
class BackendSequence {
 public:
  virtual ~BackendSequence() = default;
  virtual int64_t length() const = 0;
  // A new sequence holding the first n tokens of this one (shared or copied; either way this
  // sequence is not changed by what the fork appends).
  virtual std::unique_ptr<BackendSequence> fork(int64_t n) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;     // "cpu", "cuda", "hip"
  virtual std::string device() const = 0;   // the GPU's name; empty on the CPU
  virtual const ModelArch& arch() const = 0;
  // Weight bytes one decode step reads on this backend (the GPU keeps them as float32).
  virtual uint64_t weight_bytes() const = 0;
  // An empty sequence storing K/V in `config`, with room for max_tokens tokens including
  // what its forks append.
  virtual std::unique_ptr<BackendSequence> start(const kernels::KvConfig& config, int64_t max_tokens) = 0;
  // Runs `tokens` at positions [seq.length(), +n); logits (host memory): [n][n_vocab] when
  // all_logits, else [1][n_vocab] for the last token.
  virtual void forward(BackendSequence& seq, std::span<const int32_t> tokens, bool all_logits, float* logits) = 0;
};

// The CPU runtime on `threads` workers (0 = all cores); `model` must outlive the backend.
std::unique_ptr<Backend> make_cpu_backend(const Model& model, int threads);

// The GPU forward (gpu_model.h) implements the plain Llama block (Model::is_plain_llama): for
// any other model this throws an input error (exit 2) naming the architecture and the feature,
// so a GPU run never computes a different model than the file describes.
void require_gpu_forward_support(const Model& model, const std::string& backend);

}  // namespace kvgate::runtime
