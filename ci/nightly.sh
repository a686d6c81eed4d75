#!/usr/bin/env bash
# Nightly quality gate: build, run the nightly suite into the results database, gate it against
# the latest passing run of the same suite and model, and leave the evidence in an artifacts
# folder. Exits with the gate's status (0 pass, 1 a check failed, 2 bad input, 3 environment).
#
# Environment (all optional):
#   SUITE                 suite to run (default nightly; SUITE=smoke tries the job in ~1-2 min)
#   KVGATE_ARTIFACTS      artifacts folder (default artifacts)
#   KVGATE_DB             results database, kept between nights (default $KVGATE_ARTIFACTS/kvgate.db)
#   KVGATE_POLICY         gate policy (default ci/gates/default.json)
#   KVGATE_BUILD_DIR      build folder for scripts/build (default build)
#   KVGATE_SKIP_BUILD=1   use an existing $KVGATE_BUILD_DIR/bin/kvgate
#   KVGATE_EVAL_ARGS      extra `kvgate eval` flags, e.g. "--threads 8 --kv fp8,q4_0". A --limit
#                         run is stored as interrupted, so it is gated but never becomes a baseline.
#   KVGATE_GATE_ARGS      extra `kvgate gate` flags. Once, after upgrading past the change that made
#                         llama.cpp's cache types rotate by default (docs/kv-specs.md), the suites'
#                         q8_0/q4_0 rows have new canonical strings; bridge that night with
#                         "--pair-config q8_0/q8_0=q8_0 --pair-config q4_0/q4_0=q4_0".
#
# Latency is gated night to night under any load (docs/gates.md, "How latency is gated"): each
# config's TTFT/TPOT in CPU time of the work per CPU time of a calibration workload timed around
# each item, against the baseline's, so a runner that is still busy with the build (or anything
# else) does not fail it and a slowdown of every config alike still does. The workload follows
# the thread count: keep --threads (KVGATE_EVAL_ARGS) the same from night to night, or the check
# is skipped with a note. bench/latency-gate-bench measures what it catches (docs/perf.md).
#
# Artifacts: eval.json, gate.json, gate-junit.xml (one test case per check), gate.md (for a PR
# comment), report.html (self-contained), report.md.
set -euo pipefail
cd "$(dirname "$0")/.."

suite="${SUITE:-nightly}"
artifacts="${KVGATE_ARTIFACTS:-artifacts}"
db="${KVGATE_DB:-$artifacts/kvgate.db}"
policy="${KVGATE_POLICY:-ci/gates/default.json}"
build_dir="${KVGATE_BUILD_DIR:-build}"
mkdir -p "$artifacts" "$(dirname "$db")"

if [[ "${KVGATE_SKIP_BUILD:-0}" != 1 ]]; then
  KVGATE_BUILD_DIR="$build_dir" scripts/build
fi
kvgate="$build_dir/bin/kvgate"
[[ -x "$kvgate" ]] || { echo "nightly: $kvgate not found (build first or unset KVGATE_SKIP_BUILD)" >&2; exit 3; }

"$kvgate" model fetch >&2
# shellcheck disable=SC2086  # KVGATE_EVAL_ARGS is a list of flags
"$kvgate" eval --suite "$suite" --db "$db" --json ${KVGATE_EVAL_ARGS:-} >"$artifacts/eval.json"
run="$(grep -o '"run":[0-9]*' "$artifacts/eval.json" | head -1 | cut -d: -f2)"
[[ -n "$run" ]] || { echo "nightly: no run id in $artifacts/eval.json" >&2; exit 3; }

# "passing:SUITE": the latest complete run of this suite and model, older than tonight's, that no
# stored gate decision failed. The first night has none and passes with a note.
set +e
"$kvgate" gate --db "$db" --baseline "passing:$suite" --candidate "$run" --policy "$policy" \
  --allow-missing-baseline --junit "$artifacts/gate-junit.xml" --report "$artifacts/gate.md" --json ${KVGATE_GATE_ARGS:-} \
  >"$artifacts/gate.json"
gate_status=$?
set -e
if [[ $gate_status -ne 0 && $gate_status -ne 1 ]]; then
  echo "nightly: kvgate gate failed with exit $gate_status" >&2
  exit "$gate_status"
fi

baseline="$(grep -o '"baseline": [0-9]*' "$artifacts/gate.json" | head -1 | awk '{print $2}')"
"$kvgate" report --db "$db" --run "$run" ${baseline:+--baseline "$baseline"} \
  --html "$artifacts/report.html" --md "$artifacts/report.md" >&2

verdict=$([[ $gate_status -eq 0 ]] && echo PASSED || echo FAILED)
echo "nightly: suite $suite, run $run, baseline ${baseline:-none}: gate $verdict"
echo "nightly: artifacts in $artifacts: gate.md gate-junit.xml gate.json report.html report.md eval.json (db $db)"
if [[ $gate_status -ne 0 ]]; then
  grep '^- `' "$artifacts/gate.md" | head -20 || true
fi
exit "$gate_status"
