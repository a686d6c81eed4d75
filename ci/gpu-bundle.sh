#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run ci/gpu-check.sh without building or downloading
# anything there. That machine has CUDA and CMake but not kvgate's Debian libraries (SQLite,
# OpenBLAS, fmt, utf8proc, xxhash, GoogleTest), no network, and only 64 MiB of files travel to
# it with the working tree. So, on this machine:
#   1. build the CUDA binaries (Release, for sm_90 only: the check machines are Hopper, and each
#      of the three binaries carries its own copy of the kernels per architecture; set
#      KVGATE_BUNDLE_CUDA_ARCHS="80;90" for an A100 too): kvgate, the GPU tests, the benchmark;
#   2. copy them with every shared library they load except glibc's, libstdc++/libgcc_s, the
#      CUDA driver (the device's own; Debian 12's libstdc++, linked in or carried, would ask for
#      glibc 2.36) and cuBLAS (libcublas/libcublasLt: 540 MB, ten times what may travel; the
#      device's CUDA toolkit has them, found through the binaries' runpath or
#      /usr/local/cuda/lib64), to be run with LD_LIBRARY_PATH pointing there;
#   3. cut the default model (when fetched) to its first 2 blocks (KVGATE_BUNDLE_MODEL_LAYERS),
#      its embedding requantized to Q4_0, with scripts/slice_gguf.py in a throwaway virtual environment (gguf from PyPI), for
#      the GPU-vs-CPU eval and model test;
#   4. pack it all into .gpu-bundle.tar.xz (git-ignored; xz, since OpenBLAS's many kernels
#      shrink 8x) and check that it fits — the bundle plus every file that travels with the
#      working tree (tracked, or untracked and not ignored) at most 56 MiB of the 64 — and asks
#      no glibc or libstdc++ newer than Ubuntu 22.04's (2.35, GCC 12's GLIBCXX_3.4.30).
# Then: device run with command "ci/gpu-check.sh --bundle .gpu-bundle.tar.xz" and carry
# [".gpu-bundle.tar.xz"]. Usage: ci/gpu-bundle.sh [build-dir]; exit 0 when packed.
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-gpu-bundle}"
out=.gpu-bundle.tar.xz
limit_mib=56  # bundle + working tree, of the 64 MiB that travel (the rest: slack for logs and edits)
archs="${KVGATE_BUNDLE_CUDA_ARCHS:-90}"
layers="${KVGATE_BUNDLE_MODEL_LAYERS:-2}"  # blocks of the default model the slice keeps

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVGATE_CUDA=ON -DKVGATE_BENCH=OFF \
  -DKVGATE_CUDA_ARCHS="$archs" -DCMAKE_EXE_LINKER_FLAGS="" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 3; }
cmake --build "$build" -j "$(nproc)" --target gpu_cuda_tests gpu_kv_bench_cuda kvgate >"$build.build.log" 2>&1 ||
  { tail -50 "$build.build.log"; exit 3; }

stage="$build/bundle"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib"
binaries=("$build/bin/kvgate" "$build/tests/gpu/gpu_cuda_tests" "$build/bench/gpu/gpu_kv_bench_cuda")
for b in "${binaries[@]}"; do
  cp "$b" "$stage/bin/"
  # glibc (and the loader), libgcc_s and the driver's libcuda must be the device's own, and so
  # must cuBLAS, which is far too large to travel.
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libresolv|ld-linux[^/]*|libgcc_s|libstdc\+\+|libcuda|libcublas|libcublasLt)\.so' |
    while read -r lib; do cp -L "$lib" "$stage/lib/"; done
done
strip --strip-unneeded "$stage"/lib/*.so* 2>/dev/null || true
strip --strip-all "$stage"/bin/* 2>/dev/null || true  # symbols only: the device code is untouched
newest() { objdump -T "$stage"/bin/* "$stage"/lib/* 2>/dev/null | grep -Eo "$1_[0-9.]*[0-9]" | sort -uV | tail -1; }
glibc=$(newest GLIBC)
glibcxx=$(newest GLIBCXX)

model_src="${KVGATE_HOME:-$HOME/.cache/kvgate}/models/SmolLM2-135M-Instruct.Q4_1.gguf"
if [[ -f "$model_src" ]]; then
  venv=$(mktemp -d)
  trap 'rm -rf "$venv"' EXIT
  python3 -m venv "$venv" && "$venv/bin/pip" install --quiet --disable-pip-version-check gguf==0.19.0
  # The Q8_0 embedding is 30 of the full slice's 41 MB (35 of the 56 MiB bundle packed); as Q4_0
  # it is half that. Both backends run the same file, so the comparison is unchanged in kind.
  # Each block adds ~2.1 MiB packed: 4 blocks came to 43.1 MiB, 2 bring the bundle under 40.
  "$venv/bin/python" scripts/slice_gguf.py "$model_src" "$stage/model.gguf" --layers "$layers" --embedding-q4-0
else
  echo "default model not fetched ($model_src): the bundle has no model, so the device run skips the eval"
fi

XZ_OPT=-T0 tar -cJf "$out" -C "$stage" .
bundle_bytes=$(stat -c %s "$out")
# What travels besides the bundle: the files of the working tree git does not ignore.
tree_bytes=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r stat -c %s -- 2>/dev/null |
  awk '{s += $1} END {print s + 0}')
mib() { awk -v b="$1" 'BEGIN {printf "%.1f", b / 1048576}'; }
echo "$out: $(mib "$bundle_bytes") MiB (CUDA sm $archs; $(ls "$stage/bin" | tr '\n' ' '); $(ls "$stage/lib" | wc -l)" \
  "libraries; model $( [[ -f "$stage/model.gguf" ]] && mib "$(stat -c %s "$stage/model.gguf")" || echo 0) MiB" \
  "unpacked; needs $glibc, $glibcxx)"
for f in "$stage"/bin/* "$stage"/model.gguf; do
  [[ -f "$f" ]] && echo "  $(basename "$f"): $(mib "$(xz -T0 -c "$f" | wc -c)") MiB packed alone"
done
echo "with the working tree ($(mib "$tree_bytes") MiB): $(mib $((bundle_bytes + tree_bytes))) MiB of ${limit_mib} MiB"
if (( bundle_bytes + tree_bytes > limit_mib * 1048576 )); then
  echo "$out and the working tree come to over ${limit_mib} MiB: they would not travel to the device" >&2
  exit 1
fi
for pair in "$glibc GLIBC_2.35" "$glibcxx GLIBCXX_3.4.30"; do
  read -r needed most <<<"$pair"
  if [[ "$(printf '%s\n%s\n' "$needed" "$most" | sort -V | tail -1)" != "$most" ]]; then
    echo "the bundle needs $needed, newer than the $most a device image may have" >&2
    exit 1
  fi
done
