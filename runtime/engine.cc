#include "runtime/backend.h"

#include "core/error.h"
#include "core/thread_pool.h"

namespace kvgate::runtime {
namespace {

class CpuSequence final : public BackendSequence {
 public:
  CpuSequence(std::shared_ptr<ModelKvCache> cache, kernels::SeqId seq) : cache_(std::move(cache)), seq_(seq) {}
  ~CpuSequence() override { cache_->release(seq_); }
  CpuSequence(const CpuSequence&) = delete;
  CpuSequence& operator=(const CpuSequence&) = delete;

  int64_t length() const override { return cache_->length(seq_); }
  std::unique_ptr<BackendSequence> fork(int64_t n) override {
    return std::make_unique<CpuSequence>(cache_, cache_->fork(seq_, n));  // shares pages, copy on write
  }
  ModelKvCache& cache() { return *cache_; }
  kernels::SeqId id() const { return seq_; }

 private:
  std::shared_ptr<ModelKvCache> cache_;  // shared with the forks
  kernels::SeqId seq_;
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(const Model& model, int threads) : model_(model), pool_(threads) {}
  std::string backend() const override { return "cpu"; }
  std::string device() const override { return ""; }
  const ModelArch& arch() const override { return model_.arch(); }
  uint64_t weight_bytes() const override { return model_.weight_bytes(); }
  std::unique_ptr<BackendSequence> start(const kernels::KvConfig& config, int64_t max_tokens) override {
    std::shared_ptr<ModelKvCache> cache = model_.make_cache(config, max_tokens);
    const kernels::SeqId seq = cache->create_sequence();
    return std::make_unique<CpuSequence>(std::move(cache), seq);
  }
  void forward(BackendSequence& seq, std::span<const int32_t> tokens, bool all_logits, float* logits) override {
    auto* cpu = dynamic_cast<CpuSequence*>(&seq);
    if (!cpu) throw_usage_error("CPU engine: a sequence from another backend");
    model_.forward(pool_, cpu->cache(), cpu->id(), tokens, all_logits, logits);
  }

 private:
  const Model& model_;
  ThreadPool pool_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(const Model& model, int threads) {
  return std::make_unique<CpuBackend>(model, threads);
}

void require_gpu_forward_support(const Model& model, const std::string& backend) {
  std::string why;
  if (model.arch().arch == "llama" && model.is_plain_llama(&why)) return;
  if (why.empty()) why = "architecture '" + model.arch().arch + "'";
  throw_input_error(model.path() + ": the " + backend + " backend runs the plain Llama block only, and this " +
                    model.arch().arch + " model has " + why + "; run it with --backend cpu");
}

}  // namespace kvgate::runtime
