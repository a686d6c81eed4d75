// kvgate's entry point: builds the command tree and maps every failure to the exit codes of
// the CLI contract (0 ok, 1 gate failed, 2 bad usage/input, 3 internal/environment).
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "harness/build_info.h"
#include "harness/commands.h"

namespace {

std::string version_line() {
  return std::string("kvgate ") + kvgate::harness::kVersion + " (git " + kvgate::harness::kGitSha +
         ", backends: " + kvgate::harness::kBackends + ")";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvgate: evaluation and regression gates for KV-cache quantization"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_line());
  kvgate::harness::CommandContext ctx;
  for (int i = 0; i < argc; ++i) ctx.command_line += (i ? " " : "") + std::string(argv[i]);
  try {
    kvgate::harness::add_model_commands(app, ctx);
    kvgate::harness::add_evalset_commands(app, ctx);
    kvgate::harness::add_kv_commands(app, ctx);
    kvgate::harness::add_bench_commands(app, ctx);
    kvgate::harness::add_tokenize_commands(app, ctx);
    kvgate::harness::add_runs_commands(app, ctx);
    kvgate::harness::add_infer_commands(app, ctx);
    kvgate::harness::add_eval_commands(app, ctx);
    kvgate::harness::add_workload_commands(app, ctx);
    kvgate::harness::add_gate_commands(app, ctx);
    kvgate::harness::add_report_commands(app, ctx);
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  } catch (const kvgate::Error& e) {
    std::fprintf(stderr, "kvgate: error: %s\n", e.what());
    return e.exit_code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "kvgate: error: out of memory\n");
    return 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvgate: internal error: %s\n", e.what());
    return 3;
  }
  return ctx.exit_code;
}
