// Tokenizer throughput on the default model's vocabulary (docs/perf.md, "Tokenizer"): encode and
// decode of ~100 KB of mixed text (English, Korean, Japanese, code with CRLF and tabs, numeric
// rows), against one pass of UTF-8 validation over the same bytes as the bound.
#include <benchmark/benchmark.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/gguf.h"
#include "runtime/model_store.h"
#include "runtime/tokenizer.h"
#include "runtime/unicode.h"

namespace {

namespace rt = kvgate::runtime;

const std::string& mixed_text() {
  static const std::string text = [] {
    const char* parts[] = {
        "The quick brown fox jumps over the lazy dog. ",
        "서울특별시 인구는 약 940만 명이다. ",
        "def f(x):\r\n\treturn x ** 2  # 🤗\n",
        "| 17 | 1,299.50 | 3 |\n",
        "東京は日本の首都です。",
        "    \n\n",
        "Ångström café naïve. ",
    };
    std::string s;
    uint32_t state = 12345;  // fixed LCG: the same text on every run
    while (s.size() < 100000) {
      state = state * 1664525u + 1013904223u;
      s += parts[(state >> 16) % 7];
    }
    return s;
  }();
  return text;
}

// Loaded once: building the tokenizer (~0.1 s) is not what these benchmarks measure.
const rt::Tokenizer* default_tokenizer() {
  static std::unique_ptr<rt::GgufFile> file;
  static std::unique_ptr<rt::Tokenizer> tok;
  if (!tok) {
    const auto home = rt::kvgate_home();
    if (rt::check_cached_model(rt::default_model(), home) != rt::CacheState::verified) return nullptr;
    file = std::make_unique<rt::GgufFile>(rt::GgufFile::open(rt::cached_model_path(rt::default_model(), home).string()));
    tok = std::make_unique<rt::Tokenizer>(rt::Tokenizer::from_gguf(*file));
  }
  return tok.get();
}

void BM_Utf8ValidateBound(benchmark::State& state) {
  const std::string& text = mixed_text();
  for (auto _ : state) benchmark::DoNotOptimize(rt::unicode::find_invalid_utf8(text));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_Utf8ValidateBound);

void BM_Encode100KB(benchmark::State& state) {
  const rt::Tokenizer* tok = default_tokenizer();
  if (!tok) {
    state.SkipWithError("default model not fetched; run `kvgate model fetch`");
    return;
  }
  const std::string& text = mixed_text();
  size_t n_tokens = 0;
  for (auto _ : state) {
    const std::vector<int32_t> ids = tok->encode(text);
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(n_tokens), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Encode100KB)->Unit(benchmark::kMillisecond);

void BM_Decode100KB(benchmark::State& state) {
  const rt::Tokenizer* tok = default_tokenizer();
  if (!tok) {
    state.SkipWithError("default model not fetched; run `kvgate model fetch`");
    return;
  }
  const std::vector<int32_t> ids = tok->encode(mixed_text());
  for (auto _ : state) benchmark::DoNotOptimize(tok->decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * mixed_text().size()));
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(ids.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Decode100KB)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
