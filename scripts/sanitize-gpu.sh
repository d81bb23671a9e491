#!/usr/bin/env bash
# scripts/sanitize-gpu.sh TOOL BIN SECONDS PARALLEL [FILTER] — compute-sanitizer TOOL (memcheck, racecheck,
# synccheck, initcheck) on each test of the GPU test binary BIN in a process of its own, PARALLEL at a
# time, each stopped after SECONDS. Run nothing else on the GPU meanwhile: the tools serialise kernels,
# and other work beside them runs several times slower. The whole suite in one process does not fit a
# device call under racecheck (two attention tests alone took 93 s), so each test gets its own limit and
# its own line, printed as it ends:
#   clean | FOUND (the tool reported errors or hazards) | TIMEOUT (checked up to where it stopped) | FAILED
# then a totals line and the first reports. Exits 1 if any test was FOUND or FAILED. The NCCL tests run
# with API-error reports off: libnccl asks about kernels it has no sm_90 image for (its own reports).
set -uo pipefail
tool=${1:?tool} bin=${2:?binary} limit=${3:?seconds per test} par=${4:?parallel}
filter=${5:-'-CudaGemmEarly.*'}
work=$(mktemp -d)
"$bin" --gtest_list_tests --gtest_filter="$filter" | awk '/^[^ ]/{s=$1} /^  /{print s $1}' > "$work/list"
one() {  # one TEST: a line for it
  local t=$1 log; log=$work/$(echo "$t" | tr '/' '_').log
  local api=(); [[ $t == *Nccl* ]] && api=(--report-api-errors no)
  local s=$SECONDS
  timeout "$limit" compute-sanitizer --tool "$tool" "${api[@]}" --error-exitcode 3 "$bin" --gtest_filter="$t" \
    > "$log" 2>&1
  local rc=$? r
  case $rc in 0) r=clean ;; 3) r=FOUND ;; 124) r=TIMEOUT ;; *) r="FAILED rc=$rc" ;; esac
  echo "$r $((SECONDS - s))s $t"
}
export -f one; export tool bin limit work
xargs -a "$work/list" -P "$par" -I{} bash -c 'one "$@"' _ {} | tee "$work/summary"
n=$(wc -l < "$work/list")
echo "== $tool: $(grep -c '^clean' "$work/summary") clean, $(grep -c '^TIMEOUT' "$work/summary") timeout," \
  "$(grep -c '^FOUND' "$work/summary") found, $(grep -c '^FAILED' "$work/summary") failed, of $n tests"
for t in $(grep -E '^(FOUND|FAILED)' "$work/summary" | awk '{print $3}' | head -5); do
  echo "== $t"; grep -v '^\[' "$work/$(echo "$t" | tr '/' '_').log" | head -40
done
! grep -qE '^(FOUND|FAILED)' "$work/summary"
