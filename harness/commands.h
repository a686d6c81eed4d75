#pragma once
// Each command family registers its subcommands on the root app. Callbacks report failure by
// throwing kvgate::Error (exit 2/3) or by setting ctx.exit_code (1 = a gate failed).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <string>
#include <thread>

namespace kvgate::harness {

struct CommandContext {
  int exit_code = 0;
  std::string command_line;  // argv joined by spaces, recorded with every run
};

// The GPU `runs show` and `report` fit sessions on (harness/weights_axis.h, GpuBudget).
struct GpuFlags {
  std::string gpu = "H100";
  double mem_gib = 0;  // 0: the preset's
  double mem_util = 0.9;
  int64_t context = 4096;
};
void add_gpu_flags(CLI::App* command, GpuFlags& flags);

// Checks on a flag's value before the command runs, so a value that cannot mean anything is a
// usage error (exit 2) naming the flag, never a run with it. A value that is not a whole number
// is left to CLI11's own conversion error.
inline CLI::Validator whole_number_at_least(int64_t min, const std::string& hint) {
  return CLI::Validator(
      [min, hint](std::string& value) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (ec != std::errc() || end != value.data() + value.size() || v >= min) return "";
        return "must be at least " + std::to_string(min) + ", got " + value + " (" + hint + ")";
      },
      "");
}

// A quantity that must be a positive finite number (a GPU's memory, bandwidth or FLOPS): 0, a
// negative number, NaN or infinity given for it is a usage error, never "use the preset's".
inline CLI::Validator positive_number(const std::string& unit) {
  return CLI::Validator(
      [unit](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (value.empty() || end != value.c_str() + value.size()) return "";  // CLI11's own conversion error
        if (std::isfinite(v) && v > 0) return "";
        return "must be a positive number of " + unit + ", got " + value;
      },
      "");
}

// A seed: a whole number in 0..2^64-1, as typed (CLI11 would wrap -1 to 2^64-1 and saturate
// 2^64 to it, so different seeds would give the same items without a word).
inline CLI::Validator seed_check() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        uint64_t v = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (!value.empty() && ec == std::errc() && end == value.data() + value.size()) return "";
        return "must be a whole number from 0 to 18446744073709551615, got " + value;
      },
      "");
}

// --threads: 0 is every core; more than 4x the machine's hardware threads (or 1024) is a typo,
// and would start that many threads and their stacks before any work.
inline CLI::Validator thread_count_check() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int64_t v = 0;
        const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
        if (ec != std::errc() || end != value.data() + value.size()) return "";
        if (v < 0) return "must be 0 (every core) or a positive count, got " + value;
        const unsigned hw = std::thread::hardware_concurrency();
        const int64_t most = hw > 0 ? std::min<int64_t>(1024, 4 * int64_t{hw}) : 1024;
        if (v > most)
          return value + " is more than " + std::to_string(most) + " (4x the " + std::to_string(hw) +
                 " hardware threads of this machine, at most 1024); give 0 for every core";
        return "";
      },
      "");
}

void add_model_commands(CLI::App& app, CommandContext& ctx);
void add_evalset_commands(CLI::App& app, CommandContext& ctx);
void add_kv_commands(CLI::App& app, CommandContext& ctx);
void add_bench_commands(CLI::App& app, CommandContext& ctx);
void add_tokenize_commands(CLI::App& app, CommandContext& ctx);
void add_runs_commands(CLI::App& app, CommandContext& ctx);
void add_generate_commands(CLI::App& app, CommandContext& ctx);
void add_perplexity_commands(CLI::App& app, CommandContext& ctx);
void add_eval_commands(CLI::App& app, CommandContext& ctx);
void add_workload_commands(CLI::App& app, CommandContext& ctx);
void add_gate_commands(CLI::App& app, CommandContext& ctx);
void add_report_commands(CLI::App& app, CommandContext& ctx);
void add_compare_commands(CLI::App& app, CommandContext& ctx);

}  // namespace kvgate::harness
