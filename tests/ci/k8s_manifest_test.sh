#!/usr/bin/env bash
# Runs tests/ci/check_k8s_manifest.py on ci/k8s/kvgate-indexed-job.yaml with a Python that has
# PyYAML (Debian's python3-yaml, from scripts/install-deps; a pyenv python3 may lack it).
# Exit 77 (ctest: skipped) when none has.
set -euo pipefail
repo="$(cd "${1:?usage: k8s_manifest_test.sh REPO_ROOT}" && pwd)"
for python in python3 /usr/bin/python3; do
  if command -v "$python" >/dev/null 2>&1 && "$python" -c 'import yaml' 2>/dev/null; then
    exec "$python" "$repo/tests/ci/check_k8s_manifest.py" "$repo/ci/k8s/kvgate-indexed-job.yaml"
  fi
done
echo "SKIPPED: no python3 with the yaml module (apt-get install python3-yaml)"
exit 77
