#pragma once
// Weights as an axis (docs/models.md): what makes two GGUF files comparable (one tokenizer),
// what a run records about the model each config ran on, and the one table `runs show` and the
// report print per {weights, KV} config: quality loss against the reference beside weight
// bytes, KV bytes per token and the sessions that fit on a stated GPU — whether the loss and
// the memory wall come from the weights or from the KV cache.
#include <cstdint>
#include <string>
#include <vector>

#include "results/store.h"
#include "results/stored_run.h"
#include "runtime/gguf.h"
#include "runtime/model.h"
#include "scoring/aggregate.h"
#include "workloads/presets.h"

namespace kvgate::harness {

// The tokenizer's fingerprint (runtime::Tokenizer::fingerprint: pipeline, tokens, types,
// scores, merges, unknown token, BOS): equal fingerprints tokenize every text to the same ids,
// whether the model is a GGUF file or a Hugging Face directory.
std::string tokenizer_fingerprint(const runtime::ModelFiles& files);

// Input error (exit 2) naming both files when `other` tokenizes differently from `reference`
// or has another vocabulary size: their logits could not be compared token by token.
void check_same_tokenizer(const runtime::Model& reference, const runtime::Model& other);

// The model as a run records it for a config (kv_spec left for the caller).
results::ConfigModel weights_identity(const runtime::Model& model, const std::string& label, const std::string& sha256);

// The GPU the weights table fits sessions on: `usable` = mem_bytes x mem_util holds the weights
// and then as many sessions of `context` tokens as fit.
struct GpuBudget {
  workloads::GpuSpec gpu;
  double mem_util = 0.9;
  int64_t context = 4096;
  std::string describe() const;  // "H100 (80 GiB x 0.90), sessions of 4,096 tokens"
};

// --gpu NAME (a capacity preset), --gpu-mem-gib (overrides its memory), --mem-util, --context.
// Usage error for an unknown GPU or a value out of range.
GpuBudget gpu_budget(const std::string& gpu, double mem_gib, double mem_util, int64_t context);

struct WeightsKvRow {
  std::string spec;
  std::string label;  // the config as the user typed it (docs/schema.md, run_configs.label): what the table shows
  results::ConfigRole role = results::ConfigRole::candidate;
  std::string weights;      // model label, "" when the run recorded no model for the config
  std::string weight_type;  // e.g. "Q4_0"
  std::string kv;           // canonical KV spec
  scoring::ItemAggregate quality;
  double gold_accuracy_delta = 0;  // gold_accuracy - the reference's (NaN without gold answers)
  double weight_bytes = 0;    // NaN when unknown
  double kv_bytes_per_token = 0;
  double kv_bytes_per_session = 0;  // at the budget's context; sliding-window layers counted when the file is there
  int64_t sessions = 0;             // -1: unknown (no weight bytes)
};

// The size of the file at `path` in bytes (a run's model file, the fallback weight bytes below);
// NaN when it is gone.
double file_size_or_nan(const std::string& path);

// One row per config of the run, the reference first, from its stored configs and item rows.
// `fallback_weight_bytes` (the run's model file size, NaN if gone) serves configs of a run made
// before models were recorded per config.
std::vector<WeightsKvRow> weights_kv_rows(const results::StoredRun& run, const GpuBudget& budget,
                                          double fallback_weight_bytes);

// The table's cells (names left-aligned in the first three columns, numbers after them) and,
// for a weights run, one line per config that changes both weights and KV saying how much of
// its mean KLD each change alone accounts for.
struct WeightsKvTable {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> attribution;
};
WeightsKvTable weights_kv_table(const std::vector<WeightsKvRow>& rows);

// The table as plain text (runs show) and as Markdown (the report), with the budget stated.
std::string weights_kv_text(const std::vector<WeightsKvRow>& rows, const GpuBudget& budget);
std::string weights_kv_markdown(const std::vector<WeightsKvRow>& rows, const GpuBudget& budget);

}  // namespace kvgate::harness
