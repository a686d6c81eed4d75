#pragma once
// `kvgate bench model`: prefill and decode speed of the runtime on a real model, each next to
// the machine bound measured in the same run — sgemm GFLOP/s through the same tiled matmul the
// prefill uses (on a GPU: one cuBLASLt f16 GEMM), and memcpy bandwidth for decode, which streams
// every weight once per token (on a GPU: the bytes a read-only kernel reads per second).
//
// The tests time what llama-bench times, so the two can be compared row by row
// (bench/compare-llama-cpp): `pp N` is one N-token prompt from an empty cache; `tg N @ dD` is N
// one-token decode steps after D tokens were put in the cache, the fill not timed. Each test
// runs once untimed first (llama-bench's warmup), then `repetitions` times.
#include <string>
#include <vector>

namespace kvgate::harness {

struct ModelBenchOptions {
  std::string model;                       // --model or the default model
  std::vector<std::string> kv = {"f16", "q4_0"};
  std::vector<int> decode_contexts = {1024, 4096};  // depths D of the tg tests; 0 = empty cache
  int prefill_tokens = 512;                // 0: no pp test
  int decode_steps = 16;                   // 0: no tg tests
  int repetitions = 1;
  int threads = 0;
  std::string backend = "cpu";
};

struct ModelBenchTest {
  std::string kv;
  std::string name;  // llama-bench's: "pp512", "tg64 @ d1024"
  int n_prompt = 0, n_gen = 0, n_depth = 0;
  std::vector<double> samples_tok_s;  // per repetition, wall clock
  std::vector<double> samples_cpu_s;  // per repetition, CPU seconds of the whole process (all threads)
  double avg_tok_s = 0, stddev_tok_s = 0;  // over samples_tok_s, as llama-bench's avg_ts/stddev_ts
  double best_tok_s = 0;
  // Against the bound: prefill GFLOP/s over sgemm; decode bytes read (weights + the KV at the
  // test's mean context) per second over memcpy.
  double rate = 0;  // GFLOP/s or GB/s at avg_tok_s
  double ratio_to_bound = 0;
};

struct ModelBenchReport {
  std::string model;
  std::string backend, device;  // device: the GPU's name, empty on the CPU
  int threads = 0;
  int repetitions = 0;
  double weight_bytes = 0;     // what one decode step reads of the weights on this backend
  double flops_per_token = 0;  // matmul FLOPs of one token's forward (2 x multiply-adds)
  double sgemm_gflop_s = 0;    // the bound for prefill: gemm_bound's GFLOP/s at the FFN shape
  std::string gemm_bound;      // which GEMM that is: the CPU's sgemm tiles, cuBLASLt f16 or kvgate's own GPU GEMM
  double copy_gb_s = 0;        // the bound for decode: bytes read per second (memcpy; a GPU's read-only kernel)
  std::vector<ModelBenchTest> tests;  // per KV config: pp, then tg at each depth
};

ModelBenchReport run_model_bench(const ModelBenchOptions& options);

}  // namespace kvgate::harness
