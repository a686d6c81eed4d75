#include "scoring/kld_report.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "core/error.h"
#include "core/percentile.h"

namespace kvgate::scoring {

ValueWithError llama_mean_and_uncertainty(double sum, double sum2, size_t count) {
  if (count < 1) return {};
  const double n = static_cast<double>(count);
  const double mean = sum / n;
  const double var = sum2 / n - mean * mean;
  return {mean, var > 0 && count > 10 ? std::sqrt(var / (n - 1)) : 0.0};
}

namespace {

double llama_covariance(double sum_a, double sum_b, double sum_ab, size_t count) {
  if (count < 10) return 0.0;
  const double n = static_cast<double>(count);
  return (sum_ab / n - (sum_a / n) * (sum_b / n)) / (n - 1);
}

// report() refuses an accumulator with no positions, so `values` is never empty here.
Distribution distribution_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  Distribution d;
  d.max = values.back();
  d.p99_9 = percentile_sorted(values, 0.999);
  d.p99 = percentile_sorted(values, 0.99);
  d.p95 = percentile_sorted(values, 0.95);
  d.p90 = percentile_sorted(values, 0.90);
  d.p75 = percentile_sorted(values, 0.75);
  d.median = percentile_sorted(values, 0.5);
  d.p25 = percentile_sorted(values, 0.25);
  d.p10 = percentile_sorted(values, 0.10);
  d.p5 = percentile_sorted(values, 0.05);
  d.p1 = percentile_sorted(values, 0.01);
  d.p0_1 = percentile_sorted(values, 0.001);
  d.min = values.front();
  return d;
}

}  // namespace

void KldAccumulator::add(const PositionComparison& c) {
  ++count_;
  sum_nll_ += c.nll_q;
  sum_nll2_ += c.nll_q * c.nll_q;
  sum_nll_base_ += c.nll_ref;
  sum_nll_base2_ += c.nll_ref * c.nll_ref;
  sum_nll_nll_base_ += c.nll_q * c.nll_ref;
  sum_kld_ += c.kld;
  sum_kld2_ += c.kld * c.kld;
  const double dp2 = c.delta_p * c.delta_p;
  sum_dp_ += c.delta_p;
  sum_dp2_ += dp2;
  sum_dp4_ += dp2 * dp2;
  if (c.same_top1) ++same_top_;
  kld_values_.push_back(c.kld);
  dp_values_.push_back(c.delta_p);
}

KldReport KldAccumulator::report() const {
  if (count_ == 0) throw_input_error("KL-divergence report: no scored positions");
  KldReport r;
  r.count = count_;
  const double n = static_cast<double>(count_);

  const ValueWithError log_ppl = llama_mean_and_uncertainty(sum_nll_, sum_nll2_, count_);
  const ValueWithError log_ppl_base = llama_mean_and_uncertainty(sum_nll_base_, sum_nll_base2_, count_);
  r.ppl_q = {std::exp(log_ppl.value), std::exp(log_ppl.value) * log_ppl.error};
  r.ppl_base = {std::exp(log_ppl_base.value), std::exp(log_ppl_base.value) * log_ppl_base.error};
  const double cov = llama_covariance(sum_nll_, sum_nll_base_, sum_nll_nll_base_, count_);
  const double ratio_var = log_ppl.error * log_ppl.error + log_ppl_base.error * log_ppl_base.error - 2.0 * cov;
  // Perfectly correlated NLLs can leave a rounding-sized negative variance.
  r.ln_ppl_ratio = {log_ppl.value - log_ppl_base.value, std::sqrt(std::max(ratio_var, 0.0))};
  r.ppl_ratio = {std::exp(r.ln_ppl_ratio.value), std::exp(r.ln_ppl_ratio.value) * r.ln_ppl_ratio.error};

  r.kld_mean = llama_mean_and_uncertainty(sum_kld_, sum_kld2_, count_);
  r.kld = distribution_of(kld_values_);

  r.delta_p_mean = llama_mean_and_uncertainty(sum_dp_, sum_dp2_, count_);
  r.delta_p = distribution_of(dp_values_);
  const ValueWithError mse = llama_mean_and_uncertainty(sum_dp2_, sum_dp4_, count_);
  const double rms = std::sqrt(mse.value);
  // llama.cpp divides by the RMS unguarded; identical configs (RMS 0) get error 0, not NaN.
  r.delta_p_rms = {rms, rms > 0 ? 0.5 / rms * mse.error : 0.0};

  const double same = static_cast<double>(same_top_) / n;
  r.same_top1 = {same, count_ > 1 ? std::sqrt(same * (1.0 - same) / (n - 1)) : 0.0};
  return r;
}

namespace {

[[gnu::format(printf, 2, 3)]] void append(std::string& out, const char* format, ...) {
  char line[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(line, sizeof line, format, args);
  va_end(args);
  out += line;
}

}  // namespace

std::string format_kld_report(const KldReport& r) {
  std::string out;
  append(out, "====== Perplexity statistics ======\n");
  append(out, "Mean PPL(Q)                   : %10.6lf ± %10.6lf\n", r.ppl_q.value, r.ppl_q.error);
  append(out, "Mean PPL(base)                : %10.6lf ± %10.6lf\n", r.ppl_base.value, r.ppl_base.error);
  append(out, "Mean ln(PPL(Q)/PPL(base))     : %10.6lf ± %10.6lf\n", r.ln_ppl_ratio.value, r.ln_ppl_ratio.error);
  append(out, "Mean PPL(Q)/PPL(base)         : %10.6lf ± %10.6lf\n", r.ppl_ratio.value, r.ppl_ratio.error);
  append(out, "\n====== KL divergence statistics ======\n");
  append(out, "Mean    KLD: %10.6lf ± %10.6lf\n", r.kld_mean.value, r.kld_mean.error);
  const Distribution& k = r.kld;
  append(out, "Maximum KLD: %10.6f\n99.9%%   KLD: %10.6f\n99.0%%   KLD: %10.6f\n95.0%%   KLD: %10.6f\n", k.max,
         k.p99_9, k.p99, k.p95);
  append(out, "90.0%%   KLD: %10.6f\nMedian  KLD: %10.6f\n10.0%%   KLD: %10.6f\n 5.0%%   KLD: %10.6f\n", k.p90,
         k.median, k.p10, k.p5);
  append(out, " 1.0%%   KLD: %10.6f\n 0.1%%   KLD: %10.6f\nMinimum KLD: %10.6f\n", k.p1, k.p0_1, k.min);
  append(out, "\n====== Token probability statistics ======\n");
  append(out, "Mean    Δp: %6.3lf ± %5.3lf %%\n", 100.0 * r.delta_p_mean.value, 100.0 * r.delta_p_mean.error);
  const Distribution& d = r.delta_p;
  append(out, "Maximum Δp: %6.3lf%%\n99.9%%   Δp: %6.3lf%%\n99.0%%   Δp: %6.3lf%%\n95.0%%   Δp: %6.3lf%%\n",
         100.0 * d.max, 100.0 * d.p99_9, 100.0 * d.p99, 100.0 * d.p95);
  append(out, "90.0%%   Δp: %6.3lf%%\n75.0%%   Δp: %6.3lf%%\nMedian  Δp: %6.3lf%%\n25.0%%   Δp: %6.3lf%%\n",
         100.0 * d.p90, 100.0 * d.p75, 100.0 * d.median, 100.0 * d.p25);
  append(out, "10.0%%   Δp: %6.3lf%%\n 5.0%%   Δp: %6.3lf%%\n 1.0%%   Δp: %6.3lf%%\n 0.1%%   Δp: %6.3lf%%\n",
         100.0 * d.p10, 100.0 * d.p5, 100.0 * d.p1, 100.0 * d.p0_1);
  append(out, "Minimum Δp: %6.3lf%%\n", 100.0 * d.min);
  append(out, "RMS Δp    : %6.3lf ± %5.3lf %%\n", 100.0 * r.delta_p_rms.value, 100.0 * r.delta_p_rms.error);
  append(out, "Same top p: %6.3lf ± %5.3lf %%\n", 100.0 * r.same_top1.value, 100.0 * r.same_top1.error);
  return out;
}

}  // namespace kvgate::scoring
