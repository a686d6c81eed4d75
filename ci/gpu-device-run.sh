#!/usr/bin/env bash
# One call on a lent GPU machine, the bundle of ci/gpu-bundle.sh carried: the GPU check
# (ci/gpu-check.sh: every kernel and the GPU model tests against the CPU, two runs bit-identical),
# then the speed figures it does not take (docs/perf.md, "GPU kernels and runtime"):
# `kvgate bench model --backend cuda` on a synthetic Llama-3.1-8B-shaped model (8 of its 32
# layers) with f16, q8_0, q4_0 and q4_k weights, f16 and q4_0 KV, a 2048-token prefill and
# decode at contexts 0 and 8192, each against the bounds the same run measures (one cuBLASLt f16
# GEMM at the FFN shape; the bytes a read-only kernel reads per second); and the PyTorch peers
# at the same shapes (bench/gpu-peers.py: cuBLAS GEMM and GEMV, SDPA).
# A lent machine's minutes are few and a call is killed at its limit (600 s), so every step has
# its own budget (seconds, from the environment) and the whole fits the call; the logs go into
# one tarball under $OUT (a call brings back at most 8 files), the printed summary beside it.
#   device run: ci/gpu-device-run.sh, carry [".gpu-bundle.tar.xz"], timeout_s 590
#   budgets: KVGATE_CHECK_SECONDS (250), KVGATE_GPU_SANITIZER_TIMEOUT (60, each tool),
#            KVGATE_SPEED_SECONDS (240: synthesis and model benchmarks), KVGATE_PEER_SECONDS (60)
# KVGATE_GPU_SUITES and KVGATE_GPU_STEPS narrow the check (ci/gpu-check.sh), KVGATE_SPEED_SECONDS=0
# skips the speed figures and the peers, KVGATE_PEER_SECONDS=0 the peers, KVGATE_CHECK_SECONDS=0
# the check, KVGATE_SPEED_WEIGHTS (default "f16 q8_0 q4_0 q4_k") the weight types: a rerun of
# what failed or ran out of time.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-run-out}"
mkdir -p "$out"
logs=/tmp/kvgate-gpu-logs
rm -rf "$logs" && mkdir -p "$logs"
pack() { tar -czf "$out/gpu-logs.tar.gz" -C "$logs" . 2>/dev/null; }
trap pack EXIT
export KVGATE_GPU_LOGS="$logs/check"
export KVGATE_GPU_SANITIZER_TIMEOUT="${KVGATE_GPU_SANITIZER_TIMEOUT:-60}"

if [[ "${KVGATE_CHECK_SECONDS:-250}" != 0 ]]; then
  timeout "${KVGATE_CHECK_SECONDS:-250}" ci/gpu-check.sh --bundle .gpu-bundle.tar.xz build-gpu 2>&1 | tee "$out/check.txt"
  echo "gpu-check exit ${PIPESTATUS[0]}" | tee -a "$out/check.txt"
elif [[ ! -x build-gpu/bin/kvgate ]]; then
  # The check unpacks the bundle; without it, unpack it here.
  mkdir -p build-gpu && { tar -xJf .gpu-bundle.tar.xz -C build-gpu 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' .gpu-bundle.tar.xz build-gpu; }
fi

root="$(pwd)/build-gpu"
kv() { LD_LIBRARY_PATH="$root/lib:/usr/local/cuda/lib64" timeout "$1" "$root/bin/kvgate" "${@:2}"; }
[[ "${KVGATE_SPEED_SECONDS:-240}" == 0 ]] && exit 0
speed_end=$(($(date +%s) + ${KVGATE_SPEED_SECONDS:-240}))
left() { echo $((speed_end - $(date +%s) > 5 ? speed_end - $(date +%s) : 5)); }
{
  nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null
  for w in ${KVGATE_SPEED_WEIGHTS:-f16 q8_0 q4_0 q4_k}; do
    model=/tmp/synth-8b-$w.gguf
    kv "$(left)" model synth --shape llama-3.1-8b-layers=8 --weights "$w" --tokenizer "$root/model.gguf" \
      --out "$model" || continue
    echo "== bench model, Llama-3.1-8B shape, 8 layers, $w weights (exact path)"
    kv "$(left)" bench model --model "$model" --backend cuda --kv f16,q4_0 --prefill-tokens 2048 \
      --contexts 0,8192 --decode-steps 32
    # The engine-faithful prefill (one f16 GEMM on f16-rounded activations) where the weights are
    # 16-bit, under vLLM's arithmetic: its attention on an f16 cache is the exact fused path, so
    # the difference is the matmuls' alone (llama.cpp-cuda's attention takes the engine path).
    if [[ "$w" == f16 ]]; then
      echo "== bench model, $w weights, @engine=vllm-fa3 (one f16 GEMM per matmul)"
      kv "$(left)" bench model --model "$model" --backend cuda --kv "f16@engine=vllm-fa3" --prefill-tokens 2048 \
        --contexts 0 --decode-steps 32
    fi
    rm -f "$model"
  done
} >"$out/speed.txt" 2>&1
[[ "${KVGATE_PEER_SECONDS:-60}" == 0 ]] && exit 0
timeout "${KVGATE_PEER_SECONDS:-60}" python3 bench/gpu-peers.py --tokens 8192 --batch 1 >"$out/peers.txt" 2>&1
echo "peers exit $?" >>"$out/peers.txt"
