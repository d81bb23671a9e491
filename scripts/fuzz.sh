#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] [TARGET...] — builds the libFuzzer targets (clang, ASan + UBSan, in
# build-fuzz/) and runs each for SECONDS (default 30) on a copy of its seeds (fuzz/corpus/<target>/
# and fuzz/regressions/<target>/; with fuzz/dict/<target>.dict as libFuzzer's dictionary when it
# exists), so the repository is not modified. Inputs that crash are kept in
# build-fuzz/findings/<target>/; the script exits 1 if any target found one. See docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-30}; shift || true
dir=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPARITY_FUZZ=ON -DPARITY_CUDA=OFF \
  -DPARITY_BUILD_BENCH=OFF >/dev/null
cmake --build "$dir" -j"$(nproc)" --target parity_fuzz_targets
targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in fuzz/fuzz_*.cpp; do t=${f#fuzz/fuzz_}; targets+=("${t%.cpp}"); done
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
status=0
for t in "${targets[@]}"; do
  bin=$dir/fuzz/fuzz_$t
  [[ -x $bin ]] || { echo "fuzz: no program $bin (is parity_fuzz_target($t) in fuzz/CMakeLists.txt?)" >&2; exit 2; }
  mkdir -p "$work/$t" "$dir/findings/$t"
  cp fuzz/corpus/"$t"/* "$work/$t"/ 2>/dev/null || true
  cp fuzz/regressions/"$t"/* "$work/$t"/ 2>/dev/null || true
  dict=(); [[ -f fuzz/dict/$t.dict ]] && dict=(-dict="fuzz/dict/$t.dict")
  echo "== fuzz_$t: ${secs}s"
  if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$bin" "$work/$t" "${dict[@]}" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$dir/findings/$t/" 2>"$work/$t.log"; then
    status=1
    grep -E "ERROR|SUMMARY|Test unit written" "$work/$t.log" >&2 || tail -n 30 "$work/$t.log" >&2
  fi
  grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|cov: .*corp" "$work/$t.log" | tail -n 3
done
exit $status
