// Fused decode attention over the paged GPU cache, per KV format and context length, against the
// device's copy bandwidth measured in the same run (docs/perf.md, "GPU decode attention").
//
//   gpu_kv_bench [--tokens 8192,32768] [--formats f16,fp8_e4m3,...] [--iterations 50] [--json]
//
// Shape: one Llama-3-8B layer (32 query heads over 8 KV heads, head_dim 128), 16-token pages,
// one sequence, one decode step (one query position). GB/s counts the quantized K and V bytes a
// step must read; copy GB/s counts bytes read plus bytes written by a device-to-device copy.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/rng.h"
#include "kernels/gpu/gpu_convert.h"
#include "kernels/gpu/gpu_kv.h"
#include "kernels/gpu/tq_params.h"

namespace {

using namespace kvgate::kernels::gpu;

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    const std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!part.empty()) out.push_back(part);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

int parse_int(const std::string& flag, const std::string& text) {
  try {
    size_t used = 0;
    const int v = std::stoi(text, &used);
    if (used == text.size() && v > 0) return v;
  } catch (const std::exception&) {
  }
  kvgate::throw_usage_error(flag + ": expected a positive integer, got '" + text + "'");
}

// K and V bits per element, averaged over the two sides.
double bits_per_element(KvFormat f, int head_dim) {
  const KvFormat value = is_tq(f) ? KvFormat::u4 : f;
  return 4.0 * static_cast<double>(kv_row_bytes(f, head_dim) + kv_row_bytes(value, head_dim)) / head_dim;
}
std::string label(KvFormat f) { return is_tq(f) ? std::string(kv_format_name(f)) + "/u4" : kv_format_name(f); }

}  // namespace

int main(int argc, char** argv) try {
  std::vector<int> contexts = {8192, 32768};
  std::vector<KvFormat> formats(std::begin(kAllKvFormats), std::end(kAllKvFormats));
  int iterations = 50;
  bool json = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) kvgate::throw_usage_error(arg + ": missing value");
      return argv[++i];
    };
    if (arg == "--tokens") {
      contexts.clear();
      for (const std::string& t : split_list(value())) contexts.push_back(parse_int(arg, t));
    } else if (arg == "--formats") {
      formats.clear();
      for (const std::string& name : split_list(value())) {
        const auto f = kv_format_named(name);
        if (!f) kvgate::throw_usage_error("--formats: no GPU kernel for KV format '" + name + "'");
        formats.push_back(*f);
      }
    } else if (arg == "--iterations") {
      iterations = parse_int(arg, value());
    } else if (arg == "--json") {
      json = true;
    } else {
      kvgate::throw_usage_error("unknown argument '" + arg + "' (see the comment at the top of gpu_kv_bench.cc)");
    }
  }
  if (device_count() == 0) {
    std::fprintf(stderr, "gpu_kv_bench: no %s device present\n", vendor());
    return 3;
  }

  constexpr int kHeads = 32, kKvHeads = 8, kHeadDim = 128, kPageTokens = 16, kChunk = 2048;
  const double copy_gbps = device_copy_gbps(size_t{1} << 30, 20);
  if (!json) {
    std::printf("device %s (%s), copy bandwidth %.0f GB/s (1 GiB device-to-device, read + write)\n",
                device_name().c_str(), vendor(), copy_gbps);
    std::printf("decode: 32 query heads / 8 KV heads, head_dim 128, 16-token pages, %d steps timed\n\n", iterations);
    std::printf("| format | bits/elem | tokens | us/step | KV GB/s | / copy | speedup vs f16 |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
  }
  std::vector<double> f16_us(contexts.size(), 0.0);
  kvgate::Rng rng(1);
  std::vector<float> k(static_cast<size_t>(kChunk) * kKvHeads * kHeadDim), v(k.size());
  for (float& e : k) e = static_cast<float>(rng.normal());
  for (float& e : v) e = static_cast<float>(rng.normal());
  // f16 first, so every other format's speedup has its baseline.
  std::vector<KvFormat> order = {KvFormat::f16};
  for (KvFormat f : formats)
    if (f != KvFormat::f16) order.push_back(f);
  const bool f16_asked = std::find(formats.begin(), formats.end(), KvFormat::f16) != formats.end();
  for (KvFormat f : order) {
    const bool report = f != KvFormat::f16 || f16_asked;
    for (size_t c = 0; c < contexts.size(); ++c) {
      PagedKvShape shape;
      shape.head_dim = kHeadDim;
      shape.n_kv_heads = kKvHeads;
      shape.page_tokens = kPageTokens;
      // TurboQuant formats are keys only: they pair with 4-bit uniform values, as tq{b}/4 does.
      shape.key = KvSideFormat{f, 1.0f, std::nullopt};
      if (is_tq(f)) shape.key.tq = make_tq_params(tq_bits(f), kHeadDim, {});
      shape.value = KvSideFormat{is_tq(f) ? KvFormat::u4 : f, 1.0f, std::nullopt};
      DevicePagedKv cache(shape, contexts[c]);
      for (int t = 0; t < contexts[c]; t += kChunk) cache.append(k.data(), v.data(), std::min(kChunk, contexts[c] - t));
      const double ms = cache.time_attention_ms(kHeads, 1, iterations);
      const double us = ms * 1e3;
      if (f == KvFormat::f16) f16_us[c] = us;
      const double gbps = static_cast<double>(cache.kv_bytes_per_token()) * contexts[c] / (ms * 1e-3) / 1e9;
      if (!report) continue;
      if (json) {
        std::printf(
            "{\"device\":\"%s\",\"format\":\"%s\",\"bits\":%.3f,\"tokens\":%d,\"us_per_step\":%.3f,\"kv_gbps\":%.2f,"
            "\"copy_gbps\":%.2f,\"ratio\":%.4f,\"speedup_vs_f16\":%.3f}\n",
            device_name().c_str(), label(f).c_str(), bits_per_element(f, kHeadDim), contexts[c], us, gbps, copy_gbps,
            gbps / copy_gbps, f16_us[c] / us);
      } else {
        std::printf("| %s | %.2f | %d | %.1f | %.0f | %.2f | %.2fx |\n", label(f).c_str(), bits_per_element(f, kHeadDim),
                    contexts[c], us, gbps, gbps / copy_gbps, f16_us[c] / us);
      }
    }
  }
  return 0;
} catch (const kvgate::Error& e) {
  std::fprintf(stderr, "gpu_kv_bench: %s\n", e.what());
  return e.exit_code();
}
