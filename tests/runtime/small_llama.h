// The small random Llama both backends are checked on, the comparison of their logits, and what
// the comparison's bound is derived from: how far noise of the size of float32 summation order
// alone moves the CPU runtime's logits under a KV config (perturbed_copy, cpu_trace). Shared by
// the GPU forward test (tests/gpu/gpu_model_test.cc) and the CPU test of that noise
// (tests/runtime/noise_sensitivity_test.cc), which runs without a device.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <vector>

#include "core/float_convert.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/kv_config.h"
#include "runtime/gguf.h"
#include "runtime/model.h"
#include "tests/runtime/gguf_writer.h"

namespace kvgate::runtime::testing_small {

// A temporary file name of this test process's own: ctest runs each test as a process, several
// at once, and one test rewriting a GGUF another has mapped kills the other with SIGBUS.
inline std::string own_temp_file(const std::string& stem) {
  std::string test = "none";
  if (const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info())
    test = std::string(info->test_suite_name()) + "." + info->name();
  for (char& c : test)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return ::testing::TempDir() + "kvgate_" + stem + "_" + test + "_" + std::to_string(::getpid()) + ".gguf";
}

inline std::vector<int32_t> prompt_ids(int n, int vocab) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((1000 + 7919 * i) % vocab);
  return ids;
}

struct RowDiff {
  double max_logprob = 0;  // over each row's top-20 CPU tokens
  int top1_mismatch = 0;
};

inline double log_sum_exp(const float* row, size_t n) {
  double mx = row[0];
  for (size_t i = 1; i < n; ++i) mx = std::max<double>(mx, row[i]);
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += std::exp(row[i] - mx);
  return mx + std::log(sum);
}

inline RowDiff compare_rows(const std::vector<float>& cpu, const std::vector<float>& gpu, size_t vocab) {
  RowDiff d;
  for (size_t r = 0; r < cpu.size() / vocab; ++r) {
    const float* a = cpu.data() + r * vocab;
    const float* b = gpu.data() + r * vocab;
    for (size_t i = 0; i < vocab; ++i) EXPECT_FALSE(std::isnan(b[i])) << "row " << r << " token " << i;
    const double la = log_sum_exp(a, vocab), lb = log_sum_exp(b, vocab);
    std::vector<size_t> order(vocab);
    for (size_t i = 0; i < vocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 20, order.end(), [&](size_t x, size_t y) { return a[x] > a[y]; });
    for (int k = 0; k < 20; ++k)
      d.max_logprob = std::max(d.max_logprob, std::fabs((a[order[k]] - la) - (b[order[k]] - lb)));
    const size_t top_b = static_cast<size_t>(std::max_element(b, b + vocab) - b);
    if (top_b != order[0] && a[order[0]] - a[order[1]] > 0.05) ++d.top1_mismatch;
  }
  return d;
}

// A small random Llama written as GGUF (2 layers, embedding 256, 4 heads of 64 over 2 KV heads,
// FFN 512, vocabulary 300), so the GPU forward is checked on machines that cannot fetch the
// default model. Its weights come in several stored types (F32, F16, BF16, Q4_0, Q4_1, Q8_0,
// Q6_K), which the GPU multiplies with as stored. With `llama_cpp_groups`, the matrices that
// share an input share a type (Q4_0 Q/K/V, Q6_K gate/up), as @engine=llama.cpp's input
// rounding needs, and the inputs meet every dot type: q8_0 (Q/K/V), bf16 (output projection),
// q8_K (gate/up), q8_1 (down), f16 (the output head).
inline std::string write_small_llama(bool llama_cpp_groups = false) {
  using namespace kvgate::testing;
  constexpr uint32_t E = 256, H = 4, KV = 2, D = 64, F = 512, V = 300, L = 2;
  GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "small-random");
  w.add<uint32_t>("llama.block_count", kU32, L);
  w.add<uint32_t>("llama.context_length", kU32, 1024);
  w.add<uint32_t>("llama.embedding_length", kU32, E);
  w.add<uint32_t>("llama.feed_forward_length", kU32, F);
  w.add<uint32_t>("llama.attention.head_count", kU32, H);
  w.add<uint32_t>("llama.attention.head_count_kv", kU32, KV);
  w.add<float>("llama.rope.freq_base", kF32, 10000.0f);
  w.add<float>("llama.attention.layer_norm_rms_epsilon", kF32, 1e-5f);
  std::vector<std::string> tokens;
  for (uint32_t i = 0; i < V; ++i) {
    std::string token = "t";
    token += std::to_string(i);
    tokens.push_back(token);
  }
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  Rng rng(77);
  auto f32 = [&](size_t n, double mean, double sd) {
    std::vector<uint8_t> bytes(n * 4);
    for (size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(mean + sd * rng.normal());
      std::memcpy(bytes.data() + 4 * i, &v, 4);
    }
    return bytes;
  };
  auto q8_0 = [&](size_t n, double sd) {  // n / 32 blocks: fp16 scale, 32 int8 codes
    std::vector<uint8_t> bytes;
    for (size_t b = 0; b < n / 32; ++b) {
      const uint16_t d = f32_to_f16(static_cast<float>(sd / 40.0));
      bytes.push_back(static_cast<uint8_t>(d));
      bytes.push_back(static_cast<uint8_t>(d >> 8));
      for (int j = 0; j < 32; ++j) bytes.push_back(static_cast<uint8_t>(static_cast<int8_t>(rng.below(161)) - 80));
    }
    return bytes;
  };
  auto half_bits = [&](size_t n, double sd, bool bf16) {
    std::vector<uint8_t> bytes;
    for (size_t i = 0; i < n; ++i) {
      const float v = static_cast<float>(sd * rng.normal());
      const uint16_t h = bf16 ? f32_to_bf16(v) : f32_to_f16(v);
      bytes.push_back(static_cast<uint8_t>(h));
      bytes.push_back(static_cast<uint8_t>(h >> 8));
    }
    return bytes;
  };
  auto push_half = [](std::vector<uint8_t>& bytes, float v) {
    const uint16_t h = f32_to_f16(v);
    bytes.push_back(static_cast<uint8_t>(h));
    bytes.push_back(static_cast<uint8_t>(h >> 8));
  };
  // 4-bit codes are uniform over 16 levels (sd 4.6 steps): q4_0 centres them with -8, q4_1 with
  // a block minimum of -7.5 steps.
  auto q4 = [&](size_t n, double sd, bool with_min) {
    std::vector<uint8_t> bytes;
    const float d = static_cast<float>(sd / 4.6);
    for (size_t b = 0; b < n / 32; ++b) {
      push_half(bytes, d);
      if (with_min) push_half(bytes, -7.5f * d);
      for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(rng.below(256)));
    }
    return bytes;
  };
  // Q6_K: random 6-bit codes (sd 18.5 steps) under random 8-bit sub-block scales of 8..15.
  auto q6_k = [&](size_t n, double sd) {
    std::vector<uint8_t> bytes;
    for (size_t b = 0; b < n / 256; ++b) {
      for (int j = 0; j < 192; ++j) bytes.push_back(static_cast<uint8_t>(rng.below(256)));
      for (int j = 0; j < 16; ++j) bytes.push_back(static_cast<uint8_t>(8 + rng.below(8)));
      push_half(bytes, static_cast<float>(sd / (18.5 * 11.5)));
    }
    return bytes;
  };
  const double s = 1.0 / std::sqrt(static_cast<double>(E));
  w.add_tensor("token_embd.weight", kTF32, {E, V}, f32(static_cast<size_t>(E) * V, 0.0, 1.0));
  w.add_tensor("output_norm.weight", kTF32, {E}, f32(E, 1.0, 0.1));
  w.add_tensor("output.weight", kTF16, {E, V}, half_bits(static_cast<size_t>(E) * V, 3.0 * s, false));
  for (uint32_t l = 0; l < L; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    w.add_tensor(p + "attn_norm.weight", kTF32, {E}, f32(E, 1.0, 0.1));
    w.add_tensor(p + "attn_q.weight", kTQ4_0, {E, H * D}, q4(static_cast<size_t>(E) * H * D, 2.0 * s, false));
    if (llama_cpp_groups) {
      w.add_tensor(p + "attn_k.weight", kTQ4_0, {E, KV * D}, q4(static_cast<size_t>(E) * KV * D, 2.0 * s, false));
      w.add_tensor(p + "attn_v.weight", kTQ4_0, {E, KV * D}, q4(static_cast<size_t>(E) * KV * D, s, false));
      w.add_tensor(p + "attn_output.weight", kTBF16, {H * D, E}, half_bits(static_cast<size_t>(E) * H * D, s, true));
    } else {
      w.add_tensor(p + "attn_k.weight", kTF32, {E, KV * D}, f32(static_cast<size_t>(E) * KV * D, 0.0, 2.0 * s));
      w.add_tensor(p + "attn_v.weight", kTBF16, {E, KV * D}, half_bits(static_cast<size_t>(E) * KV * D, s, true));
      w.add_tensor(p + "attn_output.weight", kTF32, {H * D, E}, f32(static_cast<size_t>(E) * H * D, 0.0, s));
    }
    w.add_tensor(p + "ffn_norm.weight", kTF32, {E}, f32(E, 1.0, 0.1));
    if (llama_cpp_groups)
      w.add_tensor(p + "ffn_gate.weight", kTQ6_K, {E, F}, q6_k(static_cast<size_t>(E) * F, s));
    else
      w.add_tensor(p + "ffn_gate.weight", kTQ8_0, {E, F}, q8_0(static_cast<size_t>(E) * F, s));
    w.add_tensor(p + "ffn_up.weight", kTQ6_K, {E, F}, q6_k(static_cast<size_t>(E) * F, s));
    w.add_tensor(p + "ffn_down.weight", kTQ4_1, {F, E}, q4(static_cast<size_t>(E) * F, 1.0 / std::sqrt(F), true));
  }
  const std::string path =
      own_temp_file(llama_cpp_groups ? "small_llama_groups" : "small_llama");
  write_file(path, w.finish());
  return path;
}

// The logits of one backend on the checks' script: a 150-token prompt in two chunks (the second
// attends to the first's cached K/V), all rows, then 8 decode steps on a fork whose tokens are
// `steps` (teacher-forced, so two runs compare row for row) or, when `steps` is empty, the
// run's own greedy choices, written back into it.
struct Trace {
  std::vector<float> prefill, decode;
};

inline Trace cpu_trace(const Model& model, const kernels::KvConfig& config, std::vector<int32_t>& steps) {
  const size_t vocab = model.arch().n_vocab;
  const std::vector<int32_t> ids = prompt_ids(150, static_cast<int>(vocab));
  ThreadPool pool(2);
  auto cache = model.make_cache(config, 200);
  const kernels::SeqId seq = cache->create_sequence();
  Trace t;
  t.prefill.resize(ids.size() * vocab);
  model.forward(pool, *cache, seq, std::span<const int32_t>(ids.data(), 100), true, t.prefill.data());
  model.forward(pool, *cache, seq, std::span<const int32_t>(ids.data() + 100, 50), true, t.prefill.data() + 100 * vocab);
  const kernels::SeqId fork = cache->fork(seq, 150);
  const bool choose = steps.empty();
  std::vector<float> row(t.prefill.end() - static_cast<long>(vocab), t.prefill.end());
  for (int step = 0; step < 8; ++step) {
    if (choose) steps.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
    const int32_t tok = steps[static_cast<size_t>(step)];
    model.forward(pool, *cache, fork, std::span<const int32_t>(&tok, 1), false, row.data());
    t.decode.insert(t.decode.end(), row.begin(), row.end());
  }
  return t;
}

// A copy of the GGUF at `path`, written to `out`, whose F32 norm weights ("...norm.weight") each
// move one unit in the last place, up or down by `seed`'s coin: a relative change of 2^-24 to
// 2^-23, the size of the differences float32 summation order makes in a matmul or a softmax sum.
// Both backends compute in float32 in their own orders, so the logits of a config can differ
// between them by no less than such a change moves them on one backend.
inline std::string perturbed_copy(const std::string& path, uint64_t seed, const std::string& out) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const GgufFile file = GgufFile::parse(bytes, path);
  std::vector<uint8_t> copy = bytes;
  Rng rng(seed);
  int moved = 0;
  for (const GgufTensor& t : file.tensors()) {
    if (t.type != GgmlType::F32 || !t.name.ends_with("norm.weight")) continue;
    for (uint64_t i = 0; i < t.n_elements; ++i) {
      float v;
      std::memcpy(&v, copy.data() + t.file_offset + 4 * i, 4);
      v = std::nextafter(v, rng.below(2) ? INFINITY : -INFINITY);
      std::memcpy(copy.data() + t.file_offset + 4 * i, &v, 4);
      ++moved;
    }
  }
  EXPECT_GT(moved, 0) << path << " has no F32 norm weights to perturb";
  kvgate::testing::write_file(out, copy);
  return out;
}

// The noise floor of a config on a model: the largest difference between the CPU runtime's
// logits on the model (`base`, from cpu_trace with `steps`) and on each of `seeds` perturbed
// copies (every norm weight one ulp off), on the same script; the prefill's rows, or with
// `decode` the decode steps'. Smooth configs sit near 1e-5 there; where a config rounds to a
// coarse grid (4-bit and 2-bit codes, llama.cpp's q8 matmul inputs), a change that small moves
// a value across a rounding boundary now and then and the logits by up to a whole step, and so
// does another backend's summation order.
inline RowDiff noise_floor(const std::string& path, const kernels::KvConfig& config, const std::vector<int32_t>& steps,
                           const Trace& base, bool decode, int seeds) {
  RowDiff floor;
  for (int seed = 1; seed <= seeds; ++seed) {
    const auto noisy = Model::load(perturbed_copy(path, static_cast<uint64_t>(seed),
                                                  own_temp_file("noise_" + std::to_string(seed))));
    std::vector<int32_t> same = steps;
    const Trace t = cpu_trace(*noisy, config, same);
    const RowDiff d = compare_rows(decode ? base.decode : base.prefill, decode ? t.decode : t.prefill,
                                   noisy->arch().n_vocab);
    floor.max_logprob = std::max(floor.max_logprob, d.max_logprob);
    floor.top1_mismatch = std::max(floor.top1_mismatch, d.top1_mismatch);
  }
  return floor;
}

}  // namespace kvgate::runtime::testing_small
