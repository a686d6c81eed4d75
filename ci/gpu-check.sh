#!/usr/bin/env bash
# One prepared run for a GPU machine (about 10 minutes on an H200, the build included):
#   1. build the CUDA kernels, their tests and the decode-attention benchmark (Release), or, with
#      --bundle FILE, unpack the ones ci/gpu-bundle.sh built elsewhere (a lent machine lacks
#      kvgate's Debian libraries and cannot download them; the bundle brings them and a model);
#   2. run the GPU tests: every kernel against the CPU reference (bit-identical quantization,
#      attention within an NMSE bound of float64, poisoned outputs, NaN checks), and the GPU
#      forward pass against the CPU runtime on a small random Llama written by the test, and on
#      a real model: the bundle's (the default model cut to 2 blocks) or the default model when
#      it is in $KVGATE_HOME;
#   3. with that real model: the smoke suite's first items on the CPU and then on the GPU
#      (--backend cuda), gated against each other with ci/gates/default.json;
#   4. run the benchmark: fused decode attention per KV format at 8k and 32k tokens against the
#      device copy bandwidth measured in the same run;
#   5. when compute-sanitizer is on the machine: memcheck and racecheck over the kernel tests
#      (every suite but the model-level ones, which run the same kernels many times over), last
#      since they take longest (each under KVGATE_GPU_SANITIZER_TIMEOUT seconds, default 900);
#   6. print the short tables last, each failing test's detail lines under the suite table.
# Every log goes into one folder, $KVGATE_GPU_LOGS (default <build-dir>-logs), to be copied back
# whole (on a lent device machine: KVGATE_GPU_LOGS=$OUT/gpu-check).
# KVGATE_GPU_SUITES (a regular expression) runs only the GPU test suites it matches, and
# KVGATE_GPU_STEPS (default "eval bench sanitizers") which steps follow the tests, and
# KVGATE_GPU_SANITIZER_FILTER (a gtest filter, default every suite but the model-level ones)
# which tests the sanitizers run.
# Usage: ci/gpu-check.sh [--bundle FILE] [build-dir]. Exit 0 when every test passed and the
# sanitizers found nothing, 1 when one failed, 3 when the build or the device failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=""
if [[ "${1:-}" == "--bundle" ]]; then
  bundle="$2"
  shift 2
fi
build="${1:-build-gpu}"
logs="${KVGATE_GPU_LOGS:-$build-logs}"
rm -rf "$logs" && mkdir -p "$logs" || { echo "cannot create the log folder $logs"; exit 3; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
start=$(date +%s)
model=""
if [[ -n "$bundle" ]]; then
  # tar needs the xz program for -J; the image's Python unpacks it when xz is missing.
  rm -rf "$build" && mkdir -p "$build" &&
    { tar -xJf "$bundle" -C "$build" 2>/dev/null ||
      python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bundle" "$build"; } ||
    { echo "cannot unpack $bundle"; exit 3; }
  root="$(cd "$build" && pwd)"
  bin="$build/bin"
  tests="$bin/gpu_cuda_tests"
  bench="$bin/gpu_kv_bench_cuda"
  # Only kvgate's own binaries see the bundled libraries.
  # cuBLAS is not bundled (ci/gpu-bundle.sh): the device toolkit's, where the runpath misses it.
  run() { LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}:/usr/local/cuda/lib64" "$@"; }
  [[ -f "$root/model.gguf" ]] && model="$root/model.gguf"
else
  nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVGATE_CUDA=ON -DKVGATE_BENCH=OFF \
    -DCMAKE_CUDA_COMPILER="$nvcc" >"$logs/configure.log" 2>&1 || { cat "$logs/configure.log"; exit 3; }
  cmake --build "$build" -j "$(nproc)" --target gpu_cuda_tests gpu_kv_bench_cuda kvgate >"$logs/build.log" 2>&1 ||
    { tail -50 "$logs/build.log"; exit 3; }
  bin="$build/bin"
  tests="$build/tests/gpu/gpu_cuda_tests"
  bench="$build/bench/gpu/gpu_kv_bench_cuda"
  run() { "$@"; }
  "$bin/kvgate" model info >/dev/null 2>&1 && model="$("$bin/kvgate" model info | awk '$1 == "file" {print $2}')"
fi
# The GPU model test compares the backends on this model too (the default model otherwise).
[[ -n "$model" ]] && export KVGATE_GPU_TEST_MODEL="$model"
built=$(date +%s)

# One run per suite (as the binary lists them) so the table can say which kernels failed.
# With --gtest_brief, a failed test prints one "[  FAILED  ] Suite.Name" line and there is no
# failure count to read.
passed() { local n; n=$(grep -Eo '^\[  PASSED  \] [0-9]+ test' "$1" | grep -Eo '[0-9]+' | head -1); echo "${n:-0}"; }
skipped() { local n; n=$(grep -Eo '^\[  SKIPPED \] [0-9]+ test' "$1" | grep -Eo '[0-9]+' | head -1); echo "${n:-0}"; }
failed() { grep -Ec '^\[  FAILED  \] [A-Za-z]' "$1"; }
status=0
rows=()
suites=$(run "$tests" --gtest_list_tests | grep -E '^[A-Za-z].*\.$' | sed 's/\.$//')
[[ -n "$suites" ]] || { echo "$tests lists no test suites"; exit 3; }
# A rerun of the failed suites only (a regular expression over the suite names).
[[ -n "${KVGATE_GPU_SUITES:-}" ]] && suites=$(grep -E "$KVGATE_GPU_SUITES" <<<"$suites")
details=()  # the failing suites' logs, whose detail lines go under the table
for suite in $suites; do
  log="$logs/test.${suite//\//_}.log"
  if ! run timeout 300 "$tests" --gtest_brief=1 --gtest_filter="$suite.*" >"$log" 2>&1; then
    status=1
    details+=("$log")  # a failure, or a crash or timeout that printed none
  fi
  rows+=("| $(printf '%-34s' "$suite") | $(printf '%6s' "$(passed "$log")") | $(printf '%7s' "$(skipped "$log")") | $(printf '%6s' "$(failed "$log")") |")
done
tested=$(date +%s)


eval_line="GPU-vs-CPU eval: skipped (no model: neither a bundle's nor the default one in \$KVGATE_HOME)"
steps="${KVGATE_GPU_STEPS:-eval bench sanitizers}"
step() { [[ " $steps " == *" $1 "* ]]; }
step eval || eval_line="GPU-vs-CPU eval: not run (KVGATE_GPU_STEPS)"
if [[ -n "$model" ]] && step eval; then
  db="$logs/eval.db"
  rm -f "$db" "$db-wal" "$db-shm"
  run_eval() {
    run timeout 300 "$bin/kvgate" eval --suite ci/suites/smoke.json --model "$model" --limit 4 --kv q8_0,q4_0,tq3/4 \
      --db "$db" --json --backend "$1" >"$logs/eval-$1.json" 2>&1
  }
  if run_eval cpu && run_eval cuda; then
    run timeout 60 "$bin/kvgate" gate --baseline 1 --candidate 2 --policy ci/gates/default.json --db "$db" \
      --report "$logs/eval-gate.md" >"$logs/eval-gate.log" 2>&1
    gate=$?
    eval_line="GPU-vs-CPU eval (smoke, 4 items, q8_0/q4_0/tq3/4, $(basename "$model")): gate exit $gate (report: $logs/eval-gate.md)"
    [[ $gate == 0 ]] || status=1
  else
    eval_line="GPU-vs-CPU eval: FAILED (see $logs/eval-cpu.json, $logs/eval-cuda.json)"
    tail -n 5 "$logs/eval-cpu.json" "$logs/eval-cuda.json"
    status=1
  fi
fi
evaluated=$(date +%s)

bench_log="$logs/bench.md"
if step bench; then
  run timeout 240 "$bench" --tokens 8192,32768 --iterations 50 >"$bench_log" 2>&1 || status=3
else
  echo "decode-attention benchmark: not run (KVGATE_GPU_STEPS)" >"$bench_log"
fi
benched=$(date +%s)

# The sanitizers over the kernel tests: every suite but those running whole models.
sanitizer="$(command -v compute-sanitizer || true)"
[[ -z "$sanitizer" && -x /usr/local/cuda/bin/compute-sanitizer ]] && sanitizer=/usr/local/cuda/bin/compute-sanitizer
sanitizer_lines=()
# Racecheck runs the kernels tens of times slower; a lent machine's minutes are few.
sanitizer_timeout="${KVGATE_GPU_SANITIZER_TIMEOUT:-900}"
if ! step sanitizers; then
  sanitizer_lines+=("compute-sanitizer: not run (KVGATE_GPU_STEPS)")
elif [[ -n "$sanitizer" ]]; then
  for tool in memcheck racecheck; do
    log="$logs/sanitizer.$tool.log"
    run timeout "$sanitizer_timeout" "$sanitizer" --tool "$tool" --error-exitcode 99 --print-limit 50 "$tests" --gtest_brief=1 \
      --gtest_filter="${KVGATE_GPU_SANITIZER_FILTER:--*Model*}" >"$log" 2>&1
    rc=$?
    summary=$(grep -Eo 'ERROR SUMMARY: [0-9]+ error|RACECHECK SUMMARY: [0-9]+ hazard[^ ]* displayed[^)]*\)?' "$log" | tail -1)
    case $rc in
      0) sanitizer_lines+=("compute-sanitizer $tool: ${summary:-no summary line} (kernel tests)") ;;
      99) sanitizer_lines+=("compute-sanitizer $tool: FAILED, ${summary:-errors} (see $log)"); status=1; details+=("$log") ;;
      124) sanitizer_lines+=("compute-sanitizer $tool: timed out after $sanitizer_timeout s (see $log)"); status=1 ;;
      *) sanitizer_lines+=("compute-sanitizer $tool: exit $rc, a test failed under it (see $log)"); status=1; details+=("$log") ;;
    esac
  done
else
  sanitizer_lines+=("compute-sanitizer: not on this machine (memcheck and racecheck not run)")
fi
sanitized=$(date +%s)

echo
echo "| suite                              | passed | skipped | failed |"
echo "|------------------------------------|--------|---------|--------|"
printf '%s\n' "${rows[@]}"
# Each failing test's detail lines (gtest's brief output prints only failures), per log.
for log in "${details[@]}"; do
  echo
  echo "$(basename "$log"):"
  grep -Ev '^\[(==========|----------|  PASSED  |  SKIPPED )\]|^Note: |^$' "$log" | head -60 | sed 's/^/    /'
done
echo
printf '%s\n' "${sanitizer_lines[@]}"
echo
echo "$eval_line"
echo
cat "$bench_log"
echo
echo "build $((built - start)) s, tests $((tested - built)) s, eval $((evaluated - tested)) s," \
  "bench $((benched - evaluated)) s, sanitizers $((sanitized - benched)) s, exit $status; logs in $logs"
exit "$status"
