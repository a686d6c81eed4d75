#pragma once
// The aggregate report of llama.cpp's `llama-perplexity --kl-divergence`, computed from the
// per-position comparisons of token_metrics.h, with llama.cpp's exact definitions
// (tools/perplexity/perplexity.cpp, kl_divergence()):
//
//   mean ± uncertainty of a quantity x over n positions:
//       mean = Σx / n,  var = Σx²/n − mean²,
//       uncertainty = sqrt(var / (n − 1)) if var > 0 and n > 10, else 0
//   PPL(Q) = exp(mean NLL_q) ± PPL(Q) · unc(NLL_q); PPL(base) likewise with NLL_ref
//   ln(PPL(Q)/PPL(base)) = mean NLL_q − mean NLL_ref
//       ± sqrt(unc_q² + unc_ref² − 2 cov), cov = (Σ NLL_q·NLL_ref / n − mean_q·mean_ref)/(n − 1)
//       (cov = 0 when n < 10)
//   mean Δp ± unc(Δp);  RMS Δp = sqrt(mean Δp²) ± 0.5 / RMS · unc(Δp²) (uncertainty of the
//       mean of Δp² uses Σ Δp⁴)
//   same top p = n_same / n ± sqrt(p (1 − p) / (n − 1))
//   percentiles: see scoring/stats.h (linear interpolation at fraction · (n − 1)); the median
//       is the mean of the two middle values for even n.
//
// Differences from llama.cpp, both on purpose: KL is computed from full-precision double
// log-softmax instead of llama.cpp's 16-bit quantized base log-probs with p_base < e^-16
// dropped, and all arithmetic is double. So a kvgate KLD is slightly more exact, not
// differently defined.
#include <cstddef>
#include <string>
#include <vector>

#include "scoring/token_metrics.h"

namespace kvgate::scoring {

struct ValueWithError {
  double value = 0.0;
  double error = 0.0;
};

struct Distribution {
  double max = 0.0, p99_9 = 0.0, p99 = 0.0, p95 = 0.0, p90 = 0.0, p75 = 0.0, median = 0.0;
  double p25 = 0.0, p10 = 0.0, p5 = 0.0, p1 = 0.0, p0_1 = 0.0, min = 0.0;
};

struct KldReport {
  size_t count = 0;
  ValueWithError ppl_q, ppl_base, ln_ppl_ratio;
  ValueWithError ppl_ratio;     // exp(ln ratio) ± ratio · its error
  ValueWithError kld_mean;
  Distribution kld;
  ValueWithError delta_p_mean;  // as a fraction (llama.cpp prints ×100 %)
  Distribution delta_p;
  ValueWithError delta_p_rms;
  ValueWithError same_top1;     // fraction of positions whose argmax agrees
};

// Accumulates positions in the order they are added; the same sequence of positions always
// gives a bit-identical report.
class KldAccumulator {
 public:
  void add(const PositionComparison& c);
  size_t count() const { return count_; }
  // Needs at least one position (kvgate::Error input otherwise).
  KldReport report() const;

 private:
  size_t count_ = 0;
  double sum_nll_ = 0, sum_nll2_ = 0, sum_nll_base_ = 0, sum_nll_base2_ = 0, sum_nll_nll_base_ = 0;
  double sum_kld_ = 0, sum_kld2_ = 0;
  double sum_dp_ = 0, sum_dp2_ = 0, sum_dp4_ = 0;
  size_t same_top_ = 0;
  std::vector<double> kld_values_, dp_values_;
};

// The statistics sections as llama.cpp prints them (same labels and number formats, Δp and
// same-top in %), so a kvgate report can be read side by side with llama-perplexity's.
std::string format_kld_report(const KldReport& r);

// llama.cpp's mean ± uncertainty from running sums (definition above).
ValueWithError llama_mean_and_uncertainty(double sum, double sum2, size_t count);

}  // namespace kvgate::scoring
