#!/usr/bin/env bash
# Fails when a module includes a header of a module its layer may not see (docs/architecture.md):
# core sees nothing; kernels sees core; each layer-2 module sees core and kernels but no other
# layer-2 module; only harness sees CLI11.
set -u
cd "${1:-$(dirname "$0")/..}" || exit 2
allowed() {
  case "$1" in
    core) echo "core" ;;
    kernels) echo "core kernels" ;;
    runtime|workloads) echo "core kernels $1" ;;
    evalsets|scoring|results) echo "core $1" ;;
  esac
}
bad=0
for module in core kernels runtime evalsets workloads scoring results; do
  ok=" $(allowed "$module") "
  while IFS=: read -r file line include; do
    target=$(sed -E 's/.*#include "([a-z_]+)\/.*/\1/' <<<"$include")
    if [[ "$ok" != *" $target "* ]]; then
      echo "$file:$line: $module may not include $target/ ($include)"
      bad=1
    fi
  done < <(grep -rnE '#include "(core|kernels|runtime|evalsets|workloads|scoring|results|harness|bench|tests)/' "$module")
  if grep -rlE '#include <CLI/' "$module" >/dev/null; then
    echo "$module: only harness may include CLI11"
    bad=1
  fi
done
if [[ $bad -eq 0 ]]; then echo "layering: ok"; fi
exit $bad
