#pragma once
// `kvgate bench model`: prefill and decode speed of the runtime on a real model, each next to
// the machine bound measured in the same run — sgemm GFLOP/s through the same tiled matmul the
// prefill uses, and memcpy bandwidth for decode, which streams every weight once per token.
#include <string>
#include <vector>

namespace kvgate::harness {

struct ModelBenchOptions {
  std::string model;                       // --model or the default model
  std::vector<std::string> kv = {"f16", "q4_0"};
  std::vector<int> decode_contexts = {1024, 4096};
  int prefill_tokens = 512;
  int decode_steps = 16;
  int threads = 0;
  std::string backend = "cpu";
};

struct ModelBenchRow {
  std::string kv;
  double prefill_tok_s = 0, prefill_gflop_s = 0;
  std::vector<int> contexts;
  std::vector<double> decode_tok_s, decode_gb_s;  // bytes = weights + KV read per token
};

struct ModelBenchReport {
  std::string model;
  std::string backend, device;  // device: the GPU's name, empty on the CPU
  int threads = 0;
  double weight_bytes = 0;     // what one decode step reads of the weights on this backend
  double flops_per_token = 0;  // matmul FLOPs of one token's forward (2 x multiply-adds)
  double sgemm_gflop_s = 0;    // the bound for prefill (the backend's own GEMM, F32 weights)
  double copy_gb_s = 0;        // the bound for decode (bytes read per second by memcpy)
  std::vector<ModelBenchRow> rows;
};

ModelBenchReport run_model_bench(const ModelBenchOptions& options);

}  // namespace kvgate::harness
