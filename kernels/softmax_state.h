#pragma once
// The online-softmax state of one query row (FlashInfer's state_t), written once for the CPU
// attention (kernels/attention.cc) and both merges of the GPU attention (the warps of a block
// and the sequence splits, kernels/gpu/gpu_attention.cu). The state is the running max and
// denominator; the caller's accumulator holds sum exp(score - max) * value, because its layout
// differs per backend (head_dim floats on the CPU, a few per lane on the GPU). Merges run in a
// fixed order, so results do not depend on scheduling. Plain C++17 for the device compilers.
#include <cmath>

#include "core/host_device.h"
#if !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__)
#include "kernels/exp_poly.h"
#endif

namespace kvgate::kernels {

// The device's expf; on the host exp_poly, whose AVX2 twin (simd::softmax_weights) computes a
// page's weights 8 at a time with the same bits, so the CPU attention never calls libm per score.
KVGATE_HD float softmax_exp(float x) {
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__)
  return expf(x);
#else
  return exp_poly(x);
#endif
}

struct SoftmaxState {
  float max = -INFINITY;  // the largest score seen
  float denom = 0.0f;     // sum of exp(score - max) over the scores seen

  // An online update takes three steps. First, raise the max to a chunk's largest score: the
  // returned factor exp(old max - new max) has already rescaled denom and must rescale the
  // caller's accumulators; it is exactly 1 when the max did not move (or nothing was seen), so
  // callers may skip that work.
  KVGATE_HD float raise_max(float chunk_max) {
    if (!(chunk_max > max)) return 1.0f;
    const float factor = softmax_exp(max - chunk_max);
    denom = rn_mul(denom, factor);
    max = chunk_max;
    return factor;
  }
  // Second, each score's weight under the current max (0 while the row has seen nothing: no
  // exp(-inf - -inf)).
  KVGATE_HD float weight(float score) const { return max == -INFINITY ? 0.0f : softmax_exp(score - max); }
  // Third, the chunk's weights join the denominator.
  KVGATE_HD void add(float weight_sum) { denom = rn_add(denom, weight_sum); }

  // The weight of this state's sums in a merge of disjoint key sets whose combined max is
  // `combined_max` (>= max); 0 for a state that has seen no key.
  KVGATE_HD float merge_weight(float combined_max) const {
    return max == -INFINITY ? 0.0f : softmax_exp(max - combined_max);
  }

  // Folds in a state over disjoint keys, pairwise: acc and other_acc are the two accumulators
  // (n floats); the result is left in acc.
  KVGATE_HD void merge(const SoftmaxState& other, float* acc, const float* other_acc, int n) {
    const float m = fmaxf(max, other.max);
    if (m == -INFINITY) return;
    const float a = softmax_exp(max - m), b = softmax_exp(other.max - m);
    for (int i = 0; i < n; ++i) acc[i] = rn_add(rn_mul(acc[i], a), rn_mul(other_acc[i], b));
    denom = rn_add(rn_mul(denom, a), rn_mul(other.denom, b));
    max = m;
  }

  // What an accumulator is multiplied by to normalize it: 1 / denom.
  KVGATE_HD float normalizer() const { return 1.0f / denom; }
};

// Merges n states of disjoint key sets in index order against their common max (flash-decoding's
// fixed-order merge); state i's accumulator enters the merged one with weight
// state_at(i).merge_weight(result.max).
template <class StateAt>
KVGATE_HD SoftmaxState merge_in_order(int n, StateAt state_at) {
  SoftmaxState out;
  for (int i = 0; i < n; ++i) out.max = fmaxf(out.max, state_at(i).max);
  for (int i = 0; i < n; ++i) {
    const SoftmaxState s = state_at(i);
    if (s.max != -INFINITY) out.denom = rn_add(out.denom, rn_mul(s.denom, s.merge_weight(out.max)));
  }
  return out;
}

}  // namespace kvgate::kernels
