#!/usr/bin/env bash
# One call on a lent GPU machine, the bundle of ci/gpu-bundle.sh carried: the GPU check
# (ci/gpu-check.sh: every kernel test, the tile attention kernels' pairs included, run twice for
# bit-identity by the tests themselves), then what issue 44 measures (docs/perf.md, "GPU kernels
# and runtime"): copy and pure-read bandwidth and PyTorch SDPA decode (8k/32k/128k x 1 and 8
# sequences) and prefill (2k x 32k) in the same run (bench/gpu-peers.py); decode attention
# (gpu_kv_bench) at 8k/32k/128k x 1 and 8 sequences for f16, bf16, fp8, q8_0, q4_0, nvfp4,
# tq4/u4 and kivi2, with the tile kernels and once more with the general kernel they replace
# (KVGATE_GPU_ATTENTION=general) at 32k; kvgate's prefill attention on the tensor-core kernel
# (2048 queries over 32k) and on the general kernel (512 over 8k); compute-sanitizer racecheck on
# small tile decode and prefill cases; and issue 29's open items (the model
# tests with their eight-perturbation floors, the full racecheck). Then `kvgate bench model
# --backend cuda` on a synthetic Llama-3.1-8B-shaped model (8 of its 32 layers, f16 and Q4_0
# weights).
# A lent machine's minutes are few and a call is killed at its limit, so every step has its own
# budget (seconds, from the environment) and the whole fits the sum; the logs go into one tarball
# under $OUT (a call brings back at most 8 files), the printed summary beside it.
#   device run: ci/gpu-device-run.sh, carry [".gpu-bundle.tar.xz"]
#   budgets: KVGATE_CHECK_SECONDS (420), KVGATE_GPU_SANITIZER_TIMEOUT (120, each tool),
#            KVGATE_ATTENTION_SECONDS (the attention figures, about 300 s at most; 0 skips them),
#            KVGATE_SPEED_SECONDS (150: synthesis and model benchmarks), KVGATE_PEER_SECONDS (60)
#   dry run: KVGATE_DRY_RUN=1 prints every command instead of running it (syntax and plan, here).
# Issue 44's first device run (the tile kernels' confirmation, about 5 minutes of the 15):
#   KVGATE_CHECK_SECONDS=180 KVGATE_GPU_STEPS=sanitizers KVGATE_SPEED_SECONDS=0 ci/gpu-device-run.sh
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

dry="${KVGATE_DRY_RUN:-0}"
# Runs (or, dry, prints) a command under a time limit: run_for SECONDS CMD...
run_for() {
  if [[ "$dry" == 1 ]]; then echo "would run (${1} s): ${*:2}"; return 0; fi
  timeout "$1" "${@:2}"
}

run_for "${KVGATE_CHECK_SECONDS:-420}" ci/gpu-check.sh --bundle .gpu-bundle.tar.xz build-gpu 2>&1 | tee "$out/check.txt"
echo "gpu-check exit ${PIPESTATUS[0]}" | tee -a "$out/check.txt"

root="$(pwd)/build-gpu"
lib() { LD_LIBRARY_PATH="$root/lib:/usr/local/cuda/lib64" "$@"; }
kv() { lib run_for "$1" "$root/bin/kvgate" "${@:2}"; }

# Issue 44: attention figures, each step its own budget within KVGATE_ATTENTION_SECONDS.
if [[ "${KVGATE_ATTENTION_SECONDS:-150}" != 0 ]]; then
  bench="$root/bin/gpu_kv_bench_cuda"
  tests="$root/bin/gpu_cuda_tests"
  formats=f16,bf16,fp8_e4m3,q8_0,q4_0,nvfp4,tq4,kivi2_k
  {
    echo "== decode attention, tile kernels (KV GB/s counts each format's own bytes)"
    lib run_for 60 "$bench" --tokens 8192,32768,131072 --seqs 1,8 --formats "$formats" --iterations 20
    echo "== decode attention, the general kernel (KVGATE_GPU_ATTENTION=general), 32k"
    KVGATE_GPU_ATTENTION=general lib run_for 30 "$bench" --tokens 32768 --seqs 1 --formats "$formats" --iterations 20
    echo "== prefill attention (the tensor-core kernel): 2048 queries over a 32k cache"
    lib run_for 45 "$bench" --tokens 32768 --prefill-queries 2048 --formats f16,bf16,fp8_e4m3,q8_0,q4_0,nvfp4,tq4 \
      --iterations 3
    echo "== prefill attention, the general kernel (KVGATE_GPU_ATTENTION=general): 512 queries over 8k"
    KVGATE_GPU_ATTENTION=general lib run_for 30 "$bench" --tokens 8192 --prefill-queries 512 --formats f16,q4_0 \
      --iterations 2
  } >"$out/attention.txt" 2>&1
  # racecheck: small tile decode and prefill cases with f16-sized, packed and split-key rows.
  sanitizer="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
  lib run_for 90 "$sanitizer" --tool racecheck --error-exitcode 99 "$tests" --gtest_brief=1 \
    --gtest_filter='TileKernels/GpuKvTilePairs.*/f16_f16_d128_*:TileKernels/GpuKvTilePairs.*/q4_0_q4_0_d128_prefill:TileKernels/GpuKvTilePairs.*/tq4_u4_d128_*' \
    >"$out/racecheck-tile.txt" 2>&1
  echo "racecheck exit $?" >>"$out/racecheck-tile.txt"
  # Issue 29's open items: the model tests with their eight-perturbation floors (the two
  # configs that exceeded every floor are among them), under the tile kernels.
  KVGATE_GPU_TEST_MODEL="$root/model.gguf" lib run_for 120 "$tests" --gtest_brief=1 --gtest_filter='KvConfigs/GpuSmallModel*' \
    >"$out/model-tests.txt" 2>&1
  echo "model tests exit $?" >>"$out/model-tests.txt"
fi
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
run_for "${KVGATE_PEER_SECONDS:-60}" python3 bench/gpu-peers.py --tokens 8192,32768,131072 --batch 1,8 --prefill 2048x32768 \
  >"$out/peers.txt" 2>&1
echo "peers exit $?" >>"$out/peers.txt"
