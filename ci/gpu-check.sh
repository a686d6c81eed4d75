#!/usr/bin/env bash
# One prepared run for a GPU machine (about 10 minutes on an H200, the build included):
#   1. build the CUDA kernels, their tests and the decode-attention benchmark (Release);
#   2. run the GPU tests: every kernel against the CPU reference (bit-identical quantization,
#      attention within an NMSE bound of float64, poisoned outputs, NaN checks), and the GPU
#      forward pass against the CPU runtime on a small random Llama written by the test (and on
#      the default model when it is in $KVGATE_HOME; the device machine cannot fetch it);
#   3. when the default model is in $KVGATE_HOME (a lent device machine cannot fetch it): the
#      smoke suite's first items on the CPU and then on the GPU (--backend cuda), gated against
#      each other with ci/gates/default.json;
#   4. run the benchmark: fused decode attention per KV format at 8k and 32k tokens against the
#      device copy bandwidth measured in the same run;
#   5. print the short tables last.
# Usage: ci/gpu-check.sh [build-dir]. Exit 0 when every test passed, 1 when one failed, 3 when
# the build or the device failed.
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-gpu}"
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
start=$(date +%s)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVGATE_CUDA=ON -DKVGATE_BENCH=OFF \
  -DCMAKE_CUDA_COMPILER="$nvcc" >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 3; }
cmake --build "$build" -j "$(nproc)" --target gpu_cuda_tests gpu_kv_bench_cuda kvgate >"$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; exit 3; }
built=$(date +%s)

# One run per suite so the table can say which kernels failed.
count() { local n; n=$(grep -Eo "\[  $1 *\] [0-9]+ test" "$2" | grep -Eo '[0-9]+' | head -1); echo "${n:-0}"; }
status=0
rows=()
for suite in AllElementFormats/GpuConvert GpuKvLayout GpuFormats/GpuKv GpuKvShape GpuSmallModelFixture \
  KvConfigs/GpuSmallModel KvConfigs/GpuDefaultModel; do
  log="$build.${suite//\//_}.log"
  timeout 300 "$build/tests/gpu/gpu_cuda_tests" --gtest_brief=1 --gtest_filter="$suite.*" >"$log" 2>&1 || status=1
  grep -E '^\[  (FAILED|SKIPPED) |Failure|Expected|Which is|NMSE|split|prefill:' "$log" | head -30
  rows+=("| $(printf '%-28s' "$suite") | $(printf '%6s' "$(count PASSED "$log")") | $(printf '%7s' "$(count SKIPPED "$log")") | $(printf '%6s' "$(count FAILED "$log")") |")
done
tested=$(date +%s)

eval_line="GPU-vs-CPU eval: skipped (no default model in \$KVGATE_HOME; \`kvgate model fetch\` needs the network)"
if "$build/bin/kvgate" model info >/dev/null 2>&1; then
  db="$build.eval.db"
  rm -f "$db" "$db-wal" "$db-shm"
  run_eval() {
    timeout 300 "$build/bin/kvgate" eval --suite smoke --limit 4 --kv q8_0,q4_0,tq3/4 --db "$db" --json --backend "$1" \
      >"$build.eval-$1.json" 2>&1
  }
  if run_eval cpu && run_eval cuda; then
    timeout 60 "$build/bin/kvgate" gate --baseline 1 --candidate 2 --policy ci/gates/default.json --db "$db" \
      --report "$build.eval-gate.md" >"$build.eval-gate.log" 2>&1
    gate=$?
    eval_line="GPU-vs-CPU eval (smoke, 4 items, q8_0/q4_0/tq3/4): gate exit $gate (report: $build.eval-gate.md)"
    [[ $gate == 0 ]] || status=1
  else
    eval_line="GPU-vs-CPU eval: FAILED (see $build.eval-cpu.json, $build.eval-cuda.json)"
    tail -5 "$build.eval-cpu.json" "$build.eval-cuda.json"
    status=1
  fi
fi
evaluated=$(date +%s)

bench_log="$build.bench.md"
timeout 240 "$build/bench/gpu/gpu_kv_bench_cuda" --tokens 8192,32768 --iterations 50 >"$bench_log" 2>&1 || status=3
done_at=$(date +%s)

echo
echo "| suite                        | passed | skipped | failed |"
echo "|------------------------------|--------|---------|--------|"
printf '%s\n' "${rows[@]}"
echo
echo "$eval_line"
echo
cat "$bench_log"
echo
echo "build $((built - start)) s, tests $((tested - built)) s, eval $((evaluated - tested)) s," \
  "bench $((done_at - evaluated)) s, exit $status"
exit "$status"
