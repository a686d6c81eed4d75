#!/usr/bin/env bash
# One prepared run for a GPU machine (about 10 minutes on an H200, the build included):
#   1. build the CUDA kernels, their tests and the decode-attention benchmark (Release), or, with
#      --bundle FILE, unpack the ones ci/gpu-bundle.sh built elsewhere (a lent machine lacks
#      kvgate's Debian libraries and cannot download them; the bundle brings them and a model);
#   2. run the GPU tests: every kernel against the CPU reference (bit-identical quantization,
#      attention within an NMSE bound of float64, poisoned outputs, NaN checks), and the GPU
#      forward pass against the CPU runtime on a small random Llama written by the test, and on
#      a real model: the bundle's (the default model cut to 4 blocks) or the default model when
#      it is in $KVGATE_HOME;
#   3. with that real model: the smoke suite's first items on the CPU and then on the GPU
#      (--backend cuda), gated against each other with ci/gates/default.json;
#   4. run the benchmark: fused decode attention per KV format at 8k and 32k tokens against the
#      device copy bandwidth measured in the same run;
#   5. print the short tables last.
# Usage: ci/gpu-check.sh [--bundle FILE] [build-dir]. Exit 0 when every test passed, 1 when one
# failed, 3 when the build or the device failed.
set -uo pipefail
cd "$(dirname "$0")/.."
bundle=""
if [[ "${1:-}" == "--bundle" ]]; then
  bundle="$2"
  shift 2
fi
build="${1:-build-gpu}"
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
  run() { LD_LIBRARY_PATH="$root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
  [[ -f "$root/model.gguf" ]] && model="$root/model.gguf"
else
  nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVGATE_CUDA=ON -DKVGATE_BENCH=OFF \
    -DCMAKE_CUDA_COMPILER="$nvcc" >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 3; }
  cmake --build "$build" -j "$(nproc)" --target gpu_cuda_tests gpu_kv_bench_cuda kvgate >"$build.build.log" 2>&1 ||
    { tail -50 "$build.build.log"; exit 3; }
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
for suite in $suites; do
  log="$build.${suite//\//_}.log"
  run timeout 300 "$tests" --gtest_brief=1 --gtest_filter="$suite.*" >"$log" 2>&1 || status=1
  grep -E '^\[  (FAILED|SKIPPED) |Failure|Expected|Which is|NMSE|split|prefill:' "$log" | head -30
  rows+=("| $(printf '%-34s' "$suite") | $(printf '%6s' "$(passed "$log")") | $(printf '%7s' "$(skipped "$log")") | $(printf '%6s' "$(failed "$log")") |")
done
tested=$(date +%s)

eval_line="GPU-vs-CPU eval: skipped (no model: neither a bundle's nor the default one in \$KVGATE_HOME)"
if [[ -n "$model" ]]; then
  db="$build.eval.db"
  rm -f "$db" "$db-wal" "$db-shm"
  run_eval() {
    run timeout 300 "$bin/kvgate" eval --suite ci/suites/smoke.json --model "$model" --limit 4 --kv q8_0,q4_0,tq3/4 \
      --db "$db" --json --backend "$1" >"$build.eval-$1.json" 2>&1
  }
  if run_eval cpu && run_eval cuda; then
    run timeout 60 "$bin/kvgate" gate --baseline 1 --candidate 2 --policy ci/gates/default.json --db "$db" \
      --report "$build.eval-gate.md" >"$build.eval-gate.log" 2>&1
    gate=$?
    eval_line="GPU-vs-CPU eval (smoke, 4 items, q8_0/q4_0/tq3/4, $(basename "$model")): gate exit $gate (report: $build.eval-gate.md)"
    [[ $gate == 0 ]] || status=1
  else
    eval_line="GPU-vs-CPU eval: FAILED (see $build.eval-cpu.json, $build.eval-cuda.json)"
    tail -n 5 "$build.eval-cpu.json" "$build.eval-cuda.json"
    status=1
  fi
fi
evaluated=$(date +%s)

bench_log="$build.bench.md"
run timeout 240 "$bench" --tokens 8192,32768 --iterations 50 >"$bench_log" 2>&1 || status=3
done_at=$(date +%s)

echo
echo "| suite                              | passed | skipped | failed |"
echo "|------------------------------------|--------|---------|--------|"
printf '%s\n' "${rows[@]}"
echo
echo "$eval_line"
echo
cat "$bench_log"
echo
echo "build $((built - start)) s, tests $((tested - built)) s, eval $((evaluated - tested)) s," \
  "bench $((done_at - evaluated)) s, exit $status"
exit "$status"
