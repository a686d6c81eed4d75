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
"$build/tests/gpu/gpu_cuda_tests" --gtest_brief=1 2>&1 | tee "$build.gpu_tests.log"
status=${PIPESTATUS[0]}
done_at=$(date +%s)
passed=$(grep -Eo '\[  PASSED  \] [0-9]+' "$build.gpu_tests.log" | grep -Eo '[0-9]+$' || echo 0)
skipped=$(grep -Eo '\[  SKIPPED \] [0-9]+' "$build.gpu_tests.log" | grep -Eo '[0-9]+$' || echo 0)
failed=$(grep -Eo '\[  FAILED  \] [0-9]+ test' "$build.gpu_tests.log" | grep -Eo '^[^0-9]*[0-9]+' | grep -Eo '[0-9]+' || echo 0)
echo
echo "| check                     | result |"
echo "|---------------------------|--------|"
echo "| build (s)                 | $((built - start)) |"
echo "| GPU tests passed          | $passed |"
echo "| GPU tests skipped         | $skipped |"
echo "| GPU tests failed          | $failed |"
echo "| test time (s)             | $((done_at - built)) |"
exit "$status"
