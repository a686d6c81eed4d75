#!/usr/bin/env bash
# Pre-rollout comparison: is a candidate KV config safe to replace the production one?
# Each eval set / suite / trace is run twice with the same reference (once per config), and the
# candidate run is gated against the production run item by item under a policy
# (`kvgate gate --pair-config PROD=CAND`), so a verdict rests on paired per-item deltas with
# bootstrap intervals, not on two averages. Prints a recommendation with its evidence.
#
# Usage: ci/pre-rollout.sh --production SPEC --candidate SPEC
#          [--suite NAME|FILE]... [--evalset FILE]... [--trace FILE]...
#          [--policy FILE] [--db PATH] [--out DIR] [--eval-args "FLAGS"]
# Default source: --suite smoke. Exit: 0 roll out, 1 hold (a check failed), 2 bad usage/input,
# 3 environment. Needs jq and a built kvgate ($KVGATE_BIN, else build/bin/kvgate).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
production="" candidate="" policy="ci/gates/default.json" out="artifacts/pre-rollout" db="" eval_args=""
sources=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --production) production="${2:?}"; shift 2 ;;
    --candidate) candidate="${2:?}"; shift 2 ;;
    --suite) sources+=("eval --suite $2"); shift 2 ;;
    --evalset) sources+=("eval --evalset $2"); shift 2 ;;
    --trace) sources+=("replay --trace $2"); shift 2 ;;
    --policy) policy="${2:?}"; shift 2 ;;
    --db) db="${2:?}"; shift 2 ;;
    --out) out="${2:?}"; shift 2 ;;
    --eval-args) eval_args="${2:-}"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "pre-rollout: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ -n "$production" && -n "$candidate" ]] || { echo "pre-rollout: give --production SPEC and --candidate SPEC" >&2; usage; }
[[ ${#sources[@]} -gt 0 ]] || sources=("eval --suite smoke")
command -v jq >/dev/null || { echo "pre-rollout: jq is required" >&2; exit 3; }
kvgate="${KVGATE_BIN:-build/bin/kvgate}"
[[ -x "$kvgate" ]] || { echo "pre-rollout: $kvgate not found (scripts/build, or set KVGATE_BIN)" >&2; exit 3; }
mkdir -p "$out"
db="${db:-$out/kvgate.db}"

hold=0
evidence=()
for i in "${!sources[@]}"; do
  src="${sources[$i]}"
  # shellcheck disable=SC2086  # $src and $eval_args are flag lists
  prod_run="$("$kvgate" $src --kv "$production" --db "$db" --json $eval_args | jq -r .run)"
  # shellcheck disable=SC2086
  cand_run="$("$kvgate" $src --kv "$candidate" --db "$db" --json $eval_args | jq -r .run)"
  set +e
  "$kvgate" gate --db "$db" --baseline "$prod_run" --candidate "$cand_run" --pair-config "$production=$candidate" \
    --policy "$policy" --json --report "$out/gate-$i.md" --junit "$out/gate-$i.junit.xml" >"$out/gate-$i.json"
  status=$?
  set -e
  if [[ $status -gt 1 ]]; then
    echo "pre-rollout: kvgate gate failed with exit $status on '$src'" >&2
    exit "$status"
  fi
  [[ $status -eq 1 ]] && hold=1
  prod_bytes="$("$kvgate" runs show "$prod_run" --db "$db" --json | jq -r '[.configs[] | select(.role=="candidate")][0].kv_bytes_per_token')"
  cand_bytes="$("$kvgate" runs show "$cand_run" --db "$db" --json | jq -r '[.configs[] | select(.role=="candidate")][0].kv_bytes_per_token')"
  verdict=$([[ $status -eq 0 ]] && echo "no check failed" || echo "$(jq -r .failed "$out/gate-$i.json") checks failed")
  evidence+=("$src: production run $prod_run vs candidate run $cand_run: $verdict; KV bytes/token $prod_bytes -> $cand_bytes")
  while IFS= read -r line; do evidence+=("    $line"); done < <(jq -r '.checks[] | select(.passed | not) | "\(.name): \(.detail)"' "$out/gate-$i.json")
  # The paired mean-KLD deltas are the core evidence even when nothing failed.
  while IFS= read -r line; do evidence+=("    $line"); done < <(jq -r '.checks[] | select(.passed and .kind == "regression" and .metric == "kld_mean") | "\(.name): \(.detail)"' "$out/gate-$i.json")
done

if [[ $hold -eq 0 ]]; then
  echo "RECOMMENDATION: ROLL OUT $candidate in place of $production (no gate check failed on ${#sources[@]} source(s))"
else
  echo "RECOMMENDATION: HOLD $candidate: it is worse than $production beyond the policy on at least one source"
fi
echo "Evidence (policy $policy, database $db, reports in $out):"
printf '  %s\n' "${evidence[@]}"
exit "$hold"
