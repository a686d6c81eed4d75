#!/usr/bin/env bash
# Proves tests/check_layering.sh can fail: it runs the check on tiny fake source trees, one clean
# (must pass) and one per kind of violation (each must exit 1 and name the offending file).
set -u
check="$(cd "$(dirname "$0")" && pwd)/check_layering.sh"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failed=0

# A minimal tree that follows every rule.
make_tree() {
  local root=$1
  mkdir -p "$root"/{core,kernels,runtime,evalsets,workloads,scoring,results,harness,bench,tests}
  echo '#include <cstdint>' >"$root/core/error.h"
  echo '#include "core/error.h"' >"$root/kernels/kv_format.h"
  printf '#include "core/error.h"\n#include "kernels/kv_format.h"\n' >"$root/runtime/model.h"
  echo '#include "core/error.h"' >"$root/scoring/stats.h"
  printf '#include "runtime/model.h"\n#include "scoring/stats.h"\n#include <CLI/CLI.hpp>\n' >"$root/harness/main.cc"
  echo 'kvgate_module(core SOURCES error.cc)' >"$root/core/CMakeLists.txt"
  echo 'kvgate_module(kernels SOURCES kv_format.cc DEPS kvgate_core)' >"$root/kernels/CMakeLists.txt"
  echo 'kvgate_module(runtime SOURCES model.cc DEPS kvgate_core kvgate_kernels)' >"$root/runtime/CMakeLists.txt"
  echo 'kvgate_module(scoring SOURCES stats.cc DEPS kvgate_core)' >"$root/scoring/CMakeLists.txt"
  printf 'kvgate_module(harness SOURCES main.cc\n  DEPS kvgate_runtime kvgate_scoring)\n' >"$root/harness/CMakeLists.txt"
  echo 'add_library(kvgate_bench_support STATIC support.cc)' >"$root/bench/CMakeLists.txt"
}

# expect NAME EXIT_CODE PATTERN: runs the check on $scratch/NAME.
expect() {
  local name=$1 want=$2 pattern=$3 out code
  out=$("$check" "$scratch/$name" 2>&1)
  code=$?
  if [[ $code -ne $want ]] || ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: want exit $want and /$pattern/, got exit $code:"
    echo "$out"
    failed=1
  else
    echo "ok   $name"
  fi
}

make_tree "$scratch/clean"
expect clean 0 'layering: ok'

make_tree "$scratch/harness_includes_bench"
echo '#include "bench/kernel_benchmarks.h"' >>"$scratch/harness_includes_bench/harness/main.cc"
expect harness_includes_bench 1 'harness/main.cc:4: harness may not include bench/'

make_tree "$scratch/module_includes_tests"
echo '#include "tests/runtime/gguf_writer.h"' >>"$scratch/module_includes_tests/runtime/model.h"
expect module_includes_tests 1 'runtime/model.h:3: runtime may not include tests/'

make_tree "$scratch/layer2_includes_layer2"
echo '#include "runtime/model.h"' >>"$scratch/layer2_includes_layer2/scoring/stats.h"
expect layer2_includes_layer2 1 'scoring/stats.h:2: scoring may not include runtime/'

make_tree "$scratch/core_includes_harness"
echo '#include "harness/commands.h"' >>"$scratch/core_includes_harness/core/error.h"
expect core_includes_harness 1 'core/error.h:2: core may not include harness/'

make_tree "$scratch/cli11_outside_harness"
echo '#include <CLI/CLI.hpp>' >>"$scratch/cli11_outside_harness/kernels/kv_format.h"
expect cli11_outside_harness 1 'kernels: only harness may include CLI11'

make_tree "$scratch/harness_links_bench"
echo 'target_link_libraries(kvgate_harness PUBLIC kvgate_bench_support)' >>"$scratch/harness_links_bench/harness/CMakeLists.txt"
expect harness_links_bench 1 'harness/CMakeLists.txt:3: harness may not link kvgate_bench_support \(defined in bench/\)'

make_tree "$scratch/layer2_links_layer2"
echo 'kvgate_module(scoring SOURCES stats.cc DEPS kvgate_core kvgate_runtime)' >"$scratch/layer2_links_layer2/scoring/CMakeLists.txt"
expect layer2_links_layer2 1 'scoring/CMakeLists.txt:1: scoring may not link kvgate_runtime'

make_tree "$scratch/eval_includes_report"
mkdir -p "$scratch/eval_includes_report/harness/"{eval,report}
echo '#include "core/error.h"' >"$scratch/eval_includes_report/harness/report/answers.h"
printf '#include "core/error.h"\n#include "harness/report/answers.h"\n' >"$scratch/eval_includes_report/harness/eval/runner.cc"
expect eval_includes_report 1 'harness/eval/runner.cc:2: harness/eval may not include harness/report/'

make_tree "$scratch/report_includes_eval"
mkdir -p "$scratch/report_includes_eval/harness/"{eval,report}
echo '#include "core/error.h"' >"$scratch/report_includes_eval/harness/eval/eval_plan.h"
echo '#include "harness/eval/eval_plan.h"' >"$scratch/report_includes_eval/harness/report/answers.cc"
expect report_includes_eval 1 'harness/report/answers.cc:1: harness/report may not include harness/eval/'

make_tree "$scratch/comment_names_bench"
echo '# kvgate_bench_support is only for bench/' >>"$scratch/comment_names_bench/harness/CMakeLists.txt"
expect comment_names_bench 0 'layering: ok'

exit $failed
