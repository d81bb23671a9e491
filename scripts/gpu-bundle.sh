#!/usr/bin/env bash
# scripts/gpu-bundle.sh — carry builds to a GPU machine that has CUDA but none of the Debian -dev packages
# (the device machines: build here, carry the bundle, run there).
#   scripts/gpu-bundle.sh pack DIR NAME=BUILD_DIR[:bin,bin] ...
#       DIR/lib.tar.xz: the shared libraries the binaries link beyond glibc (benchmark, httplib, ICU, ...);
#       DIR/bins.tar.xz: bins/NAME/<binary> for each build (default parity, parity_gpu_tests,
#       parity_gpu_bench), stripped, in one xz stream whose dictionary spans all of them: builds share most
#       bytes, so a second build costs ~1 MB, not ~6 MB a binary.
#   source scripts/gpu-bundle.sh unpack DIR     (on the GPU machine, from the checkout's root)
#       unpacks both, exports LD_LIBRARY_PATH and PARITY_TEST_DATA; the binaries are then DIR/bins/NAME/.
set -euo pipefail
mode=${1:?pack or unpack}; dir=${2:?folder}; shift 2
if [ "$mode" = unpack ]; then
  mkdir -p /tmp/parity-lib && tar xJf "$dir/lib.tar.xz" -C /tmp/parity-lib && tar xJf "$dir/bins.tar.xz" -C "$dir"
  export LD_LIBRARY_PATH=/tmp/parity-lib:${LD_LIBRARY_PATH:-}
  export PARITY_TEST_DATA=$PWD/tests/data
  set +eu
  return 0 2>/dev/null || exit 0
fi
[ "$mode" = pack ] || { echo "gpu-bundle.sh: unknown mode '$mode' (pack or unpack)" >&2; exit 2; }
mkdir -p "$dir"; stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir "$stage/bins" "$stage/lib"
for a in "$@"; do
  name=${a%%=*}; rest=${a#*=}; build=${rest%%:*}; list=parity,parity_gpu_tests,parity_gpu_bench
  [[ $rest == *:* ]] && list=${rest#*:}
  mkdir "$stage/bins/$name"
  for f in ${list//,/ }; do
    [ -f "$build/$f" ] || { echo "gpu-bundle.sh: $build/$f not found (build it first)" >&2; exit 1; }
    cp "$build/$f" "$stage/bins/$name/" && strip "$stage/bins/$name/$f"
    ldd "$build/$f" | awk '$3 ~ /^\// {print $3}' | grep -v -e '/libc\.so' -e '/libm\.so' -e '/ld-linux' |
      while read -r l; do cp -L "$l" "$stage/lib/"; done
  done
done
tar cf - -C "$stage/lib" . | xz -T2 -6 > "$dir/lib.tar.xz"
tar cf - -C "$stage" bins | xz -T1 --lzma2=preset=6,dict=400MiB > "$dir/bins.tar.xz"
ls -la "$dir/lib.tar.xz" "$dir/bins.tar.xz"
