#!/usr/bin/env bash
# Fails (exit 1) when a module reaches a module its layer may not see (docs/architecture.md):
# core sees nothing; kernels sees core; runtime, workloads and results see core and kernels (the
# store reads its stored KV specs as stored); evalsets, scoring and serving see core; no layer-2
# module sees another; harness sees all of them, but within it eval/ (running) and report/
# (reading stored runs back) never include each other: what both need lives in harness/ itself;
# no module sees bench/ or tests/; only harness sees CLI11. Checked twice: the #include
# lines of every file under a module, and the kvgate_* targets its CMakeLists.txt files link.
# Usage: check_layering.sh [SOURCE_ROOT]   (tests/check_layering_selftest.sh tests this script)
set -u
cd "${1:-$(dirname "$0")/..}" || exit 2
modules=(core kernels runtime evalsets workloads scoring results serving harness)
allowed() {
  case "$1" in
    core) echo "core" ;;
    kernels) echo "core kernels" ;;
    runtime|workloads|results) echo "core kernels $1" ;;
    evalsets|scoring|serving) echo "core $1" ;;
    harness) echo "core kernels runtime evalsets workloads scoring results serving harness" ;;
  esac
}
bad=0
complain() {
  echo "$1"
  bad=1
}

# Who defines each kvgate_* library: kvgate_module(NAME ...) makes kvgate_NAME, add_library
# names it directly; the owner is the top directory of the CMakeLists.txt that defines it.
declare -A owner
while IFS=: read -r file _ text; do
  dir=${file%%/*}
  if [[ $text =~ kvgate_module\(([a-z0-9_]+) ]]; then
    owner[kvgate_${BASH_REMATCH[1]}]=$dir
  elif [[ $text =~ add_(library|executable)\((kvgate_[a-z0-9_]+) ]]; then
    owner[${BASH_REMATCH[2]}]=$dir
  fi
done < <(grep -rnE --include=CMakeLists.txt '(kvgate_module|add_library|add_executable)\(' "${modules[@]}" bench tests 2>/dev/null)

for module in "${modules[@]}"; do
  [[ -d $module ]] || continue
  ok=" $(allowed "$module") "
  while IFS=: read -r file line include; do
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$include")
    [[ $ok == *" $target "* ]] || complain "$file:$line: $module may not include $target/ ($include)"
  done < <(grep -rnE '#include "(core|kernels|runtime|evalsets|workloads|scoring|results|serving|harness|bench|tests)/' "$module")
  if [[ $module != harness ]] && grep -rqE '#include <CLI/' "$module"; then
    complain "$module: only harness may include CLI11"
  fi
  while IFS=: read -r file line text; do
    text=${text%%#*}  # a comment may name anything
    for target in $(grep -oE '\bkvgate_[a-z0-9_]+' <<<"$text"); do
      dep=${owner[$target]:-}
      [[ -z $dep || $ok == *" $dep "* ]] || complain "$file:$line: $module may not link $target (defined in $dep/)"
    done
  done < <(grep -rnE --include=CMakeLists.txt 'kvgate_[a-z0-9_]+' "$module")
done
# Within harness: eval/ and report/ are two rooms on one floor.
for pair in "eval report" "report eval"; do
  read -r from to <<<"$pair"
  [[ -d harness/$from ]] || continue
  while IFS=: read -r file line include; do
    complain "$file:$line: harness/$from may not include harness/$to/ ($include); move what both need to harness/"
  done < <(grep -rnE "#include \"harness/$to/" "harness/$from")
done
if [[ $bad -eq 0 ]]; then echo "layering: ok"; fi
exit $bad
