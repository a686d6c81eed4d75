#pragma once
// Each command family registers its subcommands on the root app. Callbacks report failure by
// throwing kvgate::Error (exit 2/3) or by setting ctx.exit_code (1 = a gate failed).
#include <CLI/CLI.hpp>

#include <string>

namespace kvgate::harness {

struct CommandContext {
  int exit_code = 0;
  std::string command_line;  // argv joined by spaces, recorded with every run
};

// The GPU `runs show` and `report` fit sessions on (harness/weights.h, GpuBudget).
struct GpuFlags {
  std::string gpu = "H100";
  double mem_gib = 0;  // 0: the preset's
  double mem_util = 0.9;
  int64_t context = 4096;
};
void add_gpu_flags(CLI::App* command, GpuFlags& flags);

void add_model_commands(CLI::App& app, CommandContext& ctx);
void add_evalset_commands(CLI::App& app, CommandContext& ctx);
void add_kv_commands(CLI::App& app, CommandContext& ctx);
void add_bench_commands(CLI::App& app, CommandContext& ctx);
void add_tokenize_commands(CLI::App& app, CommandContext& ctx);
void add_runs_commands(CLI::App& app, CommandContext& ctx);
void add_infer_commands(CLI::App& app, CommandContext& ctx);
void add_eval_commands(CLI::App& app, CommandContext& ctx);
void add_workload_commands(CLI::App& app, CommandContext& ctx);
void add_gate_commands(CLI::App& app, CommandContext& ctx);
void add_report_commands(CLI::App& app, CommandContext& ctx);

}  // namespace kvgate::harness
