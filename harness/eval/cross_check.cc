#include "harness/eval/cross_check.h"

#include <algorithm>
#include <cmath>

namespace kvgate::harness {

CrossCheckObserver::CrossCheckObserver(const EvalPlan& plan) : plan_(plan) {
  for (size_t a = 0; a < plan.configs.size(); ++a)
    for (size_t b = 0; b < plan.configs.size(); ++b)
      if (!plan.configs[a].endpoint && plan.configs[b].endpoint && emulates(plan.configs[a].kv, plan.configs[b].kv))
        pairs_.push_back({a, b});
}

void CrossCheckObserver::begin_item() {
  item_ = pairs_;
  for (Totals& t : item_) t.positions = t.same_top1 = t.answers = t.same_answers = 0, t.kld_sum = t.kld_max = 0;
}

void CrossCheckObserver::observe(size_t p, const std::vector<SpanDistributions>& spans,
                                 const std::vector<int32_t>& span_tokens, const std::vector<std::vector<int32_t>>& answers) {
  Totals& t = item_[p];
  const std::vector<TopList>& emu = spans[t.emulation].lists;
  const std::vector<TopList>& eng = spans[t.engine].lists;
  if (!eng.empty())
    for (size_t j = 0; j < span_tokens.size(); ++j) {
      const scoring::TopKComparison cmp = scoring::compare_topk(emu[j].view(), eng[j].view(), span_tokens[j]);
      ++t.positions;
      t.kld_sum += cmp.position.kld;
      t.kld_max = std::max(t.kld_max, cmp.position.kld);
      t.same_top1 += cmp.position.same_top1;
    }
  ++t.answers;
  t.same_answers += answers[t.emulation] == answers[t.engine];
}

void CrossCheckObserver::commit_item() {
  for (size_t p = 0; p < pairs_.size(); ++p) {
    pairs_[p].positions += item_[p].positions;
    pairs_[p].same_top1 += item_[p].same_top1;
    pairs_[p].kld_sum += item_[p].kld_sum;
    pairs_[p].kld_max = std::max(pairs_[p].kld_max, item_[p].kld_max);
    pairs_[p].answers += item_[p].answers;
    pairs_[p].same_answers += item_[p].same_answers;
  }
}

std::vector<CrossCheck> CrossCheckObserver::results() const {
  std::vector<CrossCheck> out;
  for (const Totals& p : pairs_) {
    CrossCheck x;
    x.emulation = plan_.configs[p.emulation].spec;
    x.engine = plan_.configs[p.engine].spec;
    x.positions = p.positions;
    x.kld_mean = p.positions ? p.kld_sum / static_cast<double>(p.positions) : std::nan("");
    x.kld_max = p.kld_max;
    x.same_top1 = p.positions ? static_cast<double>(p.same_top1) / static_cast<double>(p.positions) : std::nan("");
    x.answers = p.answers;
    x.same_answer = p.answers ? static_cast<double>(p.same_answers) / static_cast<double>(p.answers) : std::nan("");
    out.push_back(x);
  }
  return out;
}

}  // namespace kvgate::harness
