#!/usr/bin/env bash
# The Slurm flow of docs/scale-out.md on a real scheduler: a single-node cluster started by
# scripts/slurm-local runs ci/slurm/submit.sh's shard array and dependent merge with the real
# kvgate, and the merged run must equal an unsharded run of the same plan; then a failed shard,
# Slurm cancelling the merge, and the documented rerun of that one shard with its merge.
#
#   tests/ci/slurm_array_test.sh REPO_ROOT [KVGATE]
#
# KVGATE (default REPO_ROOT/build/bin/kvgate) runs a small eval in part 1: two shards of
# `eval --suite smoke --limit 2 --kv q4_0 --threads 1` on the default model, merged by the merge
# job; the check is that `kvgate runs show --json` of the merged run equals that of the unsharded
# run (but for id, database, times and command) and that a gate between the two fails no check.
# Parts 2 and 3 (failure, rerun, the scripts' own refusals) run a recorder written below in
# kvgate's place, which notes how each job called it and can fail on demand.
# Exit 77 (ctest: skipped) without root, without Slurm and munge (scripts/install-deps --slurm),
# without jq, or without a built kvgate and the fetched default model.
set -euo pipefail

repo="$(cd "${1:?usage: slurm_array_test.sh REPO_ROOT [KVGATE]}" && pwd)"
kvgate="${2:-$repo/build/bin/kvgate}"
[[ "$kvgate" == /* ]] || kvgate="$PWD/$kvgate"
skip() { echo "SKIPPED: $1"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "slurmd runs jobs only as root; run this test as root (CI does)"
for tool in munged slurmctld slurmd sbatch squeue scontrol jq; do
  command -v "$tool" >/dev/null 2>&1 || skip "$tool not installed (scripts/install-deps --slurm)"
done
[[ -x "$kvgate" ]] || skip "no kvgate binary at $kvgate (build it first)"
"$kvgate" model info >/dev/null 2>&1 || skip "the default model is not fetched ($kvgate model fetch)"

# The scheduler's environment is ours alone: nothing from an enclosing Slurm job or the user's
# sbatch defaults.
while IFS='=' read -r name _; do
  [[ "$name" == SLURM_* || "$name" == SBATCH_* || "$name" == SQUEUE_* ]] && unset "$name"
done < <(env)

work="$(mktemp -d /tmp/kvgate-slurm-test.XXXXXX)"
# munged wants its socket's folders searchable by all; mktemp makes the folder private.
chmod 755 "$work"
cluster="$work/cluster"
failures=0
check() {  # description command...
  local what="$1"
  shift
  if "$@"; then echo "ok: $what"; else echo "FAILED: $what"; failures=$((failures + 1)); fi
}
whole_pid=""
cleanup() {
  local status=$?
  [[ -n "$whole_pid" ]] && kill "$whole_pid" 2>/dev/null
  if ((status != 0 || failures != 0)); then
    for f in "$work"/*/logs/* "$cluster"/log/slurm*.log; do
      [[ -f "$f" ]] && { echo "---- $f"; tail -n 20 "$f"; }
    done
  fi
  "$repo/scripts/slurm-local" stop --dir "$cluster" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

recorder="$work/bin/kvgate"
mkdir -p "$work/bin"
cat >"$recorder" <<'EOF'
#!/usr/bin/env bash
# Stands in for kvgate inside the jobs. Records go to OUT/records/, OUT being the folder above the
# databases. A file OUT/fail-shard-I makes shard I fail once (the file is consumed).
set -euo pipefail
now() { date +%s.%N; }
case "$1" in
  eval | replay)
    db="" prev=""
    for arg in "$@"; do [[ "$prev" == --db ]] && db="$arg"; prev="$arg"; done
    out="$(dirname "$(dirname "$db")")"
    record="$out/records/task-$SLURM_ARRAY_TASK_ID-of-$SLURM_ARRAY_TASK_COUNT.job-$SLURM_JOB_ID"
    mkdir -p "$out/records"
    { echo "argv: $*"; echo "start: $(now)"; } >"$record"
    [[ -e "$db" ]] && echo "found: $(<"$db")" >>"$record"
    if [[ -f "$out/fail-shard-$SLURM_ARRAY_TASK_ID" ]]; then
      rm "$out/fail-shard-$SLURM_ARRAY_TASK_ID"
      echo "unfinished shard $SLURM_ARRAY_TASK_ID" >"$db"
      exit 1
    fi
    # Odd shards take 3 s: a merge without the right dependency would start on the core an even
    # shard freed, before an odd one ended.
    sleep "$((SLURM_ARRAY_TASK_ID % 2 ? 3 : 0))"
    echo "shard $SLURM_ARRAY_TASK_ID" >"$db"
    echo "end: $(now)" >>"$record"
    ;;
  runs)
    [[ "$2" == merge ]] || exit 2
    merged="$3"
    shift 3
    record="$(dirname "$merged")/records/merge.job-$SLURM_JOB_ID"
    { echo "argv: runs merge $merged $*"; echo "start: $(now)"; } >"$record"
    for db in "$@"; do
      if [[ -f "$db" ]]; then echo "present: $db: $(<"$db")"; else echo "missing: $db"; fi
    done >>"$record"
    for db in "$@"; do [[ -f "$db" ]] || exit 2; done
    cat "$@" >"$merged"
    ;;
  *) exit 2 ;;
esac
EOF
chmod +x "$recorder"

t0=$SECONDS
env_line="$("$repo/scripts/slurm-local" start --dir "$cluster" --timeout 60)"
eval "$env_line"
t_cluster=$((SECONDS - t0))

field() { grep -o "$1: .*" "$2" | head -n 1 | cut -d' ' -f2-; }
# A job's JobState (of every task, for an array), from the controller: no slurmdbd here, and
# MinJobAge keeps ended jobs visible for 10 minutes.
job_states() { scontrol -o show job "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 | sort | tr '\n' ' '; }
wait_for_jobs() {  # seconds job...
  local deadline=$((SECONDS + $1))
  shift
  while [[ -n "$(squeue -h -o '%i' -j "$(
    IFS=,
    echo "$*"
  )" 2>/dev/null)" ]]; do
    ((SECONDS < deadline)) || { echo "FAILED: jobs $* still queued after the wait"; return 1; }
    sleep 0.5
  done
}
starts_after_ends() {  # merge-record task-record...
  local start end
  start="$(field start "$1")"
  shift
  for r in "$@"; do
    end="$(field end "$r")"
    [[ -n "$end" ]] && awk -v s="$start" -v e="$end" 'BEGIN { exit !(s >= e) }' || return 1
  done
}

# 1. The user's command with the real kvgate: two shards and the merge, waiting for the merge;
# meanwhile the same eval unsharded, for comparison.
t1=$SECONDS
a="$work/a"
whole="$work/whole.db"
eval_args=(eval --suite smoke --limit 2 --kv q4_0)
"$kvgate" "${eval_args[@]}" --threads 1 --db "$whole" >"$work/whole.out" 2>&1 &
whole_pid=$!
cd "$work"
submit_out="$(timeout 300 "$repo/ci/slurm/submit.sh" --shards 2 --threads 1 --out "$a" --kvgate "$kvgate" \
  --wait -- "${eval_args[@]}")"
t_array=$((SECONDS - t1))
wait "$whole_pid" || { cat "$work/whole.out"; echo "FAILED: the unsharded eval"; exit 1; }
whole_pid=""
t_both=$((SECONDS - t1))
array_job="$(sed -n 's/^array_job=//p' <<<"$submit_out")"
merge_job="$(sed -n 's/^merge_job=//p' <<<"$submit_out")"
check "submit.sh printed both job ids" test -n "$array_job" -a -n "$merge_job"
check "both array tasks and the merge completed" \
  test "$(job_states "$array_job")$(job_states "$merge_job")" = "COMPLETED COMPLETED COMPLETED "
for i in 0 1; do
  shard="$("$kvgate" runs show latest --json --db "$a/shards/shard-$i.db")"
  # The whole array: no --shard, kvgate reads SLURM_ARRAY_TASK_ID/COUNT itself.
  check "task $i ran shard $i of 2, taken from the array task's variables" test \
    "$(jq -c .plan.shard <<<"$shard")" = "{\"count\":2,\"from\":\"SLURM_ARRAY_TASK_ID=$i, SLURM_ARRAY_TASK_COUNT=2\",\"index\":$i}"
  check "task $i's command" bash -c '[[ "$1" == *" eval --suite smoke --limit 2 --kv q4_0 --threads 1 --db $2" ]]' _ \
    "$(jq -r .command <<<"$shard")" "$a/shards/shard-$i.db"
  check "task $i marked done" test -f "$a/shards/shard-$i.db.done"
done
merged="$("$kvgate" runs show latest --json --db "$a/merged.db")"
check "merged.db holds one run" test "$("$kvgate" runs list --json --db "$a/merged.db" | jq '.runs | length')" -eq 1
check "merged from both shards' databases" test "$(jq -r '[.plan.merged_from[].db] | join(" ")' <<<"$merged")" = \
  "$a/shards/shard-0.db $a/shards/shard-1.db"
# What names the run itself differs; everything else, the summary's numbers included, is equal.
normalized() { jq -S 'del(.id, .db, .started_at, .finished_at, .command, .plan.merged_from)'; }
"$kvgate" runs show 1 --json --db "$whole" | normalized >"$work/whole.json"
normalized <<<"$merged" >"$work/merged.json"
check "the merged run shows as the unsharded run" diff -u "$work/whole.json" "$work/merged.json"
# A gate compares runs of one database: merge the same shards next to the unsharded run. Latency
# is measured, so the policy is the default one without its latency limit.
jq '.latency |= map_values(null)' "$repo/ci/gates/default.json" >"$work/policy.json"
check "the shards merge next to the unsharded run" \
  bash -c '"$0" runs merge "$1" "$2"/shards/shard-0.db "$2"/shards/shard-1.db >/dev/null' "$kvgate" "$whole" "$a"
gate="$("$kvgate" gate --baseline 1 --candidate 2 --policy "$work/policy.json" --db "$whole" --json)" || true
check "a gate between the unsharded and the merged run fails no check" \
  test "$(jq -c '[.passed, .failed, (.checks_total > 5)]' <<<"$gate")" = "[true,0,true]"
check "a second submit into the same folder is refused" \
  bash -c '! "$0" --shards 2 --out "$1" --kvgate "$2" -- eval --suite smoke 2>/dev/null' \
  "$repo/ci/slurm/submit.sh" "$a" "$kvgate"

# 2. Shard 1 fails: Slurm cancels the merge; rerunning shard 1 alone and merging completes the run.
t2=$SECONDS
b="$work/b"
mkdir -p "$b"
touch "$b/fail-shard-1"
submit_out="$("$repo/ci/slurm/submit.sh" --shards 2 --threads 1 --out "$b" --kvgate "$recorder" \
  -- eval --suite smoke)"
array_job="$(sed -n 's/^array_job=//p' <<<"$submit_out")"
merge_job="$(sed -n 's/^merge_job=//p' <<<"$submit_out")"
wait_for_jobs 120 "$array_job" "$merge_job"
check "one task completed, one failed" test "$(job_states "$array_job")" = "COMPLETED FAILED "
check "the merge was cancelled, never run" test "$(job_states "$merge_job")" = "CANCELLED "
check "no merge record" test -z "$(find "$b/records" -name 'merge.*')"

rerun="$(sbatch --parsable --array=1 --output="$b/logs/rerun-%a.out" \
  "$repo/ci/slurm/kvgate-array.sbatch" "$recorder" "$b" 2 eval --suite smoke --threads 1)"
remerge="$(sbatch --parsable --dependency="afterok:$rerun" --kill-on-invalid-dep=yes \
  --output="$b/logs/remerge.out" "$repo/ci/slurm/kvgate-merge.sbatch" "$recorder" "$b" 2)"
wait_for_jobs 120 "$rerun" "$remerge"
check "the rerun and its merge completed" test "$(job_states "$rerun")$(job_states "$remerge")" = "COMPLETED COMPLETED "
r=("$b"/records/task-1-of-1.job-*)
# A one-task array's count is 1, so the script names the shard itself.
check "the rerun was told its shard explicitly" test "$(field argv "${r[0]}")" = \
  "eval --suite smoke --threads 1 --shard 1/2 --db $b/shards/shard-1.db"
m=("$b"/records/merge.job-*)
check "the rerun started afresh (the failed attempt's database removed)" bash -c '! grep -q "^found: " "$0"' "${r[0]}"
check "the merge after the rerun found both shards, finished" test "$(grep '^present: ' "${m[0]}" | cut -d: -f3 | tr '\n' ,)" = " shard 0, shard 1,"
check "it started after both shards ended" starts_after_ends "${m[0]}" "$b"/records/task-0-of-2.* "${r[0]}"
t_rerun=$((SECONDS - t2))

# 3. The array script alone, as Slurm would start it: a finished shard is not run again, and an
# index outside the shards is refused.
before="$(ls "$b/records" | wc -l)"
check "a finished shard run again does nothing" env SLURM_ARRAY_TASK_ID=0 SLURM_ARRAY_TASK_COUNT=2 \
  SLURM_ARRAY_TASK_MIN=0 SLURM_ARRAY_TASK_MAX=1 "$repo/ci/slurm/kvgate-array.sbatch" "$recorder" "$b" 2 eval --suite smoke
check "... and records nothing" test "$(ls "$b/records" | wc -l)" -eq "$before"
check "an array task outside the shards is refused" bash -c '
  SLURM_ARRAY_TASK_ID=2 SLURM_ARRAY_TASK_COUNT=2 SLURM_ARRAY_TASK_MIN=1 SLURM_ARRAY_TASK_MAX=2 "$@" 2>/dev/null
  test $? -eq 2' _ "$repo/ci/slurm/kvgate-array.sbatch" "$recorder" "$work/c" 2 eval --suite smoke
check "a merge with an unfinished shard is refused" bash -c '"$@" 2>/dev/null; test $? -eq 2' _ \
  "$repo/ci/slurm/kvgate-merge.sbatch" "$recorder" "$b" 3

echo "timings: cluster start ${t_cluster} s, 2-shard eval array + merge ${t_array} s (with the unsharded eval beside it ${t_both} s), failure + rerun ${t_rerun} s, total $((SECONDS - t0)) s"
((failures == 0)) || { echo "$failures check(s) failed"; exit 1; }
echo "all checks passed"
