#!/usr/bin/env bash
# Pre-rollout job for CI: `kvgate compare` (docs/gates.md, "kvgate compare"), its text and its
# Markdown (for a PR comment) written to compare.txt and compare.md in
# ${KVGATE_ARTIFACTS:-artifacts/pre-rollout}, the runs kept in ${KVGATE_DB:-that directory's
# kvgate.db}. Every argument goes to compare:
#
#   ci/pre-rollout.sh --production fp8 --candidate q8_0,q4_0,tq4/4 --suite nightly
#   ci/pre-rollout.sh --production fp8 --candidate tq4/4 --trace sessions.jsonl --policy my-margins.json
#
# Exit: compare's — 0 a candidate is recommended, 1 none is safe on this evidence, 2 bad usage or
# input, 3 environment. Needs a built kvgate ($KVGATE_BIN, else build/bin/kvgate).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $# -eq 0 || "$1" == "-h" || "$1" == "--help" ]]; then
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
fi
kvgate="${KVGATE_BIN:-build/bin/kvgate}"
[[ -x "$kvgate" ]] || { echo "pre-rollout: $kvgate not found (scripts/build, or set KVGATE_BIN)" >&2; exit 3; }
out="${KVGATE_ARTIFACTS:-artifacts/pre-rollout}"
mkdir -p "$out"
export KVGATE_DB="${KVGATE_DB:-$out/kvgate.db}"
set +e
"$kvgate" compare --md "$out/compare.md" "$@" | tee "$out/compare.txt"
status=${PIPESTATUS[0]}
set -e
exit "$status"
