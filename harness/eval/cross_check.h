#pragma once
// The engine-mode cross-check (docs/engine-mode.md): an in-process config and an endpoint
// running the same KV config (endpoint_kv.h emulates()), compared position by position (top-k
// estimator on both sides) and answer by answer. It watches the eval loop's spans; it adds
// nothing to the stored results.
#include <cstdint>
#include <string>
#include <vector>

#include "harness/eval/eval_plan.h"
#include "harness/eval/sources.h"

namespace kvgate::harness {

struct CrossCheck {
  std::string emulation, engine;  // their specs
  int64_t positions = 0;
  double kld_mean = 0;     // mean KLD_topk(emulation ‖ engine)
  double kld_max = 0;
  double same_top1 = 0;    // fraction of positions whose top-1 agrees
  int64_t answers = 0;     // greedy answers compared
  double same_answer = 0;  // fraction of greedy answers identical token for token
};

class CrossCheckObserver {
 public:
  explicit CrossCheckObserver(const EvalPlan& plan);
  size_t pairs() const { return pairs_.size(); }
  // The endpoint config of pair p: a failure while comparing the pair is blamed on it.
  size_t engine_config(size_t p) const { return pairs_[p].engine; }
  void begin_item();
  // Pair p over one scored span: every config's distributions and greedy answers, by config.
  // Throws the estimator's input error on a list it rejects.
  void observe(size_t p, const std::vector<SpanDistributions>& spans, const std::vector<int32_t>& span_tokens,
               const std::vector<std::vector<int32_t>>& answers);
  // The item is stored: its comparisons count (a failed item's do not).
  void commit_item();
  std::vector<CrossCheck> results() const;

 private:
  struct Totals {
    size_t emulation = 0, engine = 0;  // config indices
    int64_t positions = 0, same_top1 = 0, answers = 0, same_answers = 0;
    double kld_sum = 0, kld_max = 0;
  };
  const EvalPlan& plan_;
  std::vector<Totals> pairs_, item_;
};

}  // namespace kvgate::harness
