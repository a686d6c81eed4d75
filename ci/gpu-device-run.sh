#!/usr/bin/env bash
# One call on a lent GPU machine, the bundle of ci/gpu-bundle.sh carried: the GPU check
# (ci/gpu-check.sh), then the speed figures it does not take (docs/perf.md, "GPU kernels and
# runtime"): `kvgate bench model --backend cuda` on a synthetic Llama-3.1-8B-shaped model (8 of its
# 32 layers, f16 and Q4_0 weights) and the PyTorch peers at the same shapes (bench/gpu-peers.py).
# A lent machine's minutes are few and a call is killed at its limit, so every step has its own
# budget (seconds, from the environment) and the whole fits the sum; the logs go into one tarball
# under $OUT (a call brings back at most 8 files), the printed summary beside it.
#   device run: ci/gpu-device-run.sh, carry [".gpu-bundle.tar.xz"]
#   budgets: KVGATE_CHECK_SECONDS (420), KVGATE_GPU_SANITIZER_TIMEOUT (120, each tool),
#            KVGATE_SPEED_SECONDS (150: synthesis and model benchmarks), KVGATE_PEER_SECONDS (60)
# KVGATE_GPU_SUITES and KVGATE_GPU_STEPS narrow the check (ci/gpu-check.sh), KVGATE_SPEED_SECONDS=0
# skips the speed figures and the peers, KVGATE_PEER_SECONDS=0 the peers: a rerun of what failed.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-gpu-run-out}"
mkdir -p "$out"
logs=/tmp/kvgate-gpu-logs
rm -rf "$logs" && mkdir -p "$logs"
pack() { tar -czf "$out/gpu-logs.tar.gz" -C "$logs" . 2>/dev/null; }
trap pack EXIT
export KVGATE_GPU_LOGS="$logs/check"
export KVGATE_GPU_SANITIZER_TIMEOUT="${KVGATE_GPU_SANITIZER_TIMEOUT:-120}"

timeout "${KVGATE_CHECK_SECONDS:-420}" ci/gpu-check.sh --bundle .gpu-bundle.tar.xz build-gpu 2>&1 | tee "$out/check.txt"
echo "gpu-check exit ${PIPESTATUS[0]}" | tee -a "$out/check.txt"

root="$(pwd)/build-gpu"
kv() { LD_LIBRARY_PATH="$root/lib:/usr/local/cuda/lib64" timeout "$1" "$root/bin/kvgate" "${@:2}"; }
[[ "${KVGATE_SPEED_SECONDS:-150}" == 0 ]] && exit 0
speed_end=$(($(date +%s) + ${KVGATE_SPEED_SECONDS:-150}))
left() { echo $((speed_end - $(date +%s) > 5 ? speed_end - $(date +%s) : 5)); }
{
  for w in f16 q4_0; do
    model=/tmp/synth-8b-$w.gguf
    kv "$(left)" model synth --shape llama-3.1-8b-layers=8 --weights "$w" --tokenizer "$root/model.gguf" \
      --out "$model" || continue
    echo "== bench model, Llama-3.1-8B shape, 8 layers, $w weights"
    kv "$(left)" bench model --model "$model" --backend cuda --kv f16,q8_0,q4_0 --prefill-tokens 2048 \
      --contexts 0,8192 --decode-steps 32
    rm -f "$model"
  done
} >"$out/speed.txt" 2>&1
[[ "${KVGATE_PEER_SECONDS:-60}" == 0 ]] && exit 0
timeout "${KVGATE_PEER_SECONDS:-60}" python3 bench/gpu-peers.py --tokens 8192,32768 --batch 1,8 >"$out/peers.txt" 2>&1
echo "peers exit $?" >>"$out/peers.txt"
