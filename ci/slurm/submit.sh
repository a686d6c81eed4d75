#!/usr/bin/env bash
# A sharded kvgate run on Slurm: an array of N shards and, after all of them succeeded, the merge
# into one run. The two commands a user runs:
#
#   ci/slurm/submit.sh --shards 8 --out /shared/kvgate-nightly -- eval --suite nightly --kv fp8,q4_0
#   build/bin/kvgate runs show latest --db /shared/kvgate-nightly/merged.db   # once the merge job ended
#
# (or `submit.sh --wait ...`, which returns when the merge job ended, with its exit status.)
#
# Options:
#   --shards N       array tasks, one shard each (default 4)
#   --threads T      kvgate --threads and sbatch --cpus-per-task of every shard (default 2); an
#                    unsharded run compares equal only when it used the same T
#   --out DIR        folder on a file system the compute nodes share (default ./kvgate-scaleout):
#                    DIR/shards/shard-I.db, DIR/logs/, DIR/merged.db; it must not hold a run yet
#   --kvgate PATH    the kvgate binary as the compute nodes see it (default $KVGATE_BIN, else this
#                    checkout's build/bin/kvgate, else kvgate on PATH)
#   --wait           wait for the merge job and exit with its status
# After `--`: the kvgate command, `eval ...` or `replay ...`, without --db, --shard or --threads.
# Partition, account, time limit and the like come from Slurm's own SBATCH_* environment
# variables (SBATCH_PARTITION, SBATCH_ACCOUNT, SBATCH_TIMELIMIT, ...), for both jobs.
# Prints array_job=ID, merge_job=ID and merged_db=PATH on stdout. If a shard fails, Slurm cancels
# the merge (--kill-on-invalid-dep); docs/scale-out.md shows how to rerun that shard and merge.
set -euo pipefail

fail() { echo "submit.sh: $1" >&2; exit "${2:-2}"; }

here="$(cd "$(dirname "$0")" && pwd)"
shards=4 threads=2 out="kvgate-scaleout" kvgate="${KVGATE_BIN:-}" wait=0
while (($#)); do
  case "$1" in
    --shards) (($# >= 2)) || fail "--shards needs a count"; shards="$2"; shift 2 ;;
    --threads) (($# >= 2)) || fail "--threads needs a count"; threads="$2"; shift 2 ;;
    --out) (($# >= 2)) || fail "--out needs a folder"; out="$2"; shift 2 ;;
    --kvgate) (($# >= 2)) || fail "--kvgate needs a path"; kvgate="$2"; shift 2 ;;
    --wait) wait=1; shift ;;
    --) shift; break ;;
    *) fail "unknown option '$1' (see the top of ci/slurm/submit.sh)" ;;
  esac
done
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || fail "--shards must be a positive whole number, not '$shards'"
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || fail "--threads must be a positive whole number, not '$threads'"
(($# >= 1)) && [[ "$1" == eval || "$1" == replay ]] ||
  fail "after -- give the kvgate command: eval ... or replay ..."
for arg in "$@"; do
  case "$arg" in
    --db | --db=* | --shard | --shard=*) fail "do not pass $arg: each shard gets its own database and index" ;;
    --threads | --threads=*) fail "give the thread count with submit.sh --threads (it also sets --cpus-per-task)" ;;
  esac
done

if [[ -z "$kvgate" ]]; then
  if [[ -x "$here/../../build/bin/kvgate" ]]; then
    kvgate="$(cd "$here/../../build/bin" && pwd)/kvgate"
  else
    kvgate="$(command -v kvgate)" || fail "no kvgate binary: build it (scripts/build) or pass --kvgate PATH" 3
  fi
fi
[[ "$kvgate" == /* ]] || kvgate="$PWD/$kvgate"
[[ -x "$kvgate" ]] || fail "$kvgate is not an executable" 3
command -v sbatch >/dev/null 2>&1 || fail "sbatch not found: run this on a Slurm login node" 3

mkdir -p "$out"
out="$(cd "$out" && pwd)"
shopt -s nullglob
existing=("$out"/shards/shard-*.db "$out"/shards/shard-*.db.done)
[[ -e "$out/merged.db" ]] && existing+=("$out/merged.db")
((${#existing[@]} == 0)) || fail "$out already holds a sharded run (${existing[0]}); choose another --out"
mkdir -p "$out/shards" "$out/logs"

array_job="$(sbatch --parsable --array="0-$((shards - 1))" --cpus-per-task="$threads" \
  --output="$out/logs/shard-%a.out" \
  "$here/kvgate-array.sbatch" "$kvgate" "$out" "$shards" "$@" --threads "$threads")" ||
  fail "sbatch refused the shard array" 3
array_job="${array_job%%;*}"
echo "array_job=$array_job"
echo "merged_db=$out/merged.db"
echo "submit.sh: $shards shards in array job $array_job -> $out/shards/, logs in $out/logs/" >&2

merge=(sbatch --parsable --dependency="afterok:$array_job" --kill-on-invalid-dep=yes
  --output="$out/logs/merge.out" "$here/kvgate-merge.sbatch" "$kvgate" "$out" "$shards")
if ((wait)); then
  # sbatch --wait prints the job id at submission and exits with the job's status when it ends.
  set +e
  "${merge[0]}" --wait "${merge[@]:1}" | { read -r id; echo "merge_job=${id%%;*}"; cat; }
  status="${PIPESTATUS[0]}"
  set -e
  ((status == 0)) || fail "the merge job did not succeed (status $status); see $out/logs/" 1
  echo "submit.sh: merged into $out/merged.db" >&2
else
  merge_job="$("${merge[@]}")" || fail "sbatch refused the merge job (array job $array_job is queued)" 3
  echo "merge_job=${merge_job%%;*}"
  echo "submit.sh: merge job ${merge_job%%;*} runs after all shards succeeded -> $out/merged.db" >&2
fi
