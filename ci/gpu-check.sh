#!/usr/bin/env bash
# One prepared run for a GPU machine: build with CUDA, run the GPU tests against the CPU
# reference, and print a short table last. Usage: ci/gpu-check.sh [build-dir]
set -uo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-gpu}"
nvcc="${CUDACXX:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: not available"
start=$(date +%s)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVGATE_CUDA=ON -DKVGATE_BENCH=OFF \
  -DCMAKE_CUDA_COMPILER="$nvcc" >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; exit 3; }
cmake --build "$build" -j "$(nproc)" --target gpu_cuda_tests >"$build.build.log" 2>&1 || { tail -50 "$build.build.log"; exit 3; }
built=$(date +%s)
# One run per suite so the table can say which kernels failed: conversions, then KV kernels.
count() { local n; n=$(grep -Eo "\[  $1 *\] [0-9]+ test" "$2" | grep -Eo '[0-9]+' | head -1); echo "${n:-0}"; }
status=0
rows=()
for suite in GpuConvert GpuKv; do
  log="$build.$suite.log"
  "$build/tests/gpu/gpu_cuda_tests" --gtest_brief=1 --gtest_filter="*$suite*" >"$log" 2>&1 || status=1
  grep -E '^\[  (FAILED|SKIPPED) ' "$log" | head -20
  rows+=("| $(printf '%-10s' "$suite") | $(printf '%6s' "$(count PASSED "$log")") | $(printf '%7s' "$(count SKIPPED "$log")") | $(printf '%6s' "$(count FAILED "$log")") |")
done
done_at=$(date +%s)
echo
echo "| suite      | passed | skipped | failed |"
echo "|------------|--------|---------|--------|"
printf '%s\n' "${rows[@]}"
echo
echo "build $((built - start)) s, tests $((done_at - built)) s, exit $status"
exit "$status"
