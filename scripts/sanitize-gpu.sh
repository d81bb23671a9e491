#!/usr/bin/env bash
# scripts/sanitize-gpu.sh TOOL BIN SECONDS PARALLEL [FILTER] — compute-sanitizer TOOL (memcheck, racecheck,
# synccheck, initcheck) on each test of the GPU test binary BIN in a process of its own, PARALLEL at a
# time, each stopped after SECONDS. Run nothing else on the GPU meanwhile: the tools serialise kernels,
# and other work beside them runs several times slower. The tests run in sanitizer mode
# (PARITY_GPU_SANITIZE=1, tests/cuda/gpu_test_support.h: the same kernels and paths on smaller sweeps),
# the model-level and large-GEMM suites first (the longest; the short ones fill in beside them). Each
# test gets its own line, printed as it ends:
#   clean | host-only (passed, made no CUDA call: the tool has nothing to check) | FOUND (the tool reported
#   errors or hazards) | TIMEOUT (checked up to where it stopped; the tool's reports so far are counted)
#   | FAILED (the test itself failed, or the tool could not run it) | known (a test listed in racecheck_known
#   below passed, and racecheck's race reports were all it printed: they do not fail the run)
# then a totals line and the first reports. Exits 1 if any test was FOUND, FAILED or TIMEOUT. The NCCL
# tests run with API-error reports off: libnccl asks about kernels it has no sm_90 image for (its own reports).
set -uo pipefail
tool=${1:?tool} bin=${2:?binary} limit=${3:?seconds per test} par=${4:?parallel}
filter=${5:-'-CudaGemmEarly.*'}
export PARITY_GPU_SANITIZE=1
work=$(mktemp -d)
# Racecheck reports RAW hazards on shared memory that __syncthreads orders once some of the block's
# threads have met at a named barrier of fewer than the block's threads (`bar.sync 1, 128`), though
# the kernel is right: the barrier patterns alone, CudaPersistentDecodeBarriers, reproduce it, their sums
# right in every round, synccheck clean, and the whole-block patterns (0, 4) racecheck-clean beside them
# (docs/cuda.md, "Racecheck and partial named barriers"). The persistent decode step (off by default) has
# such barriers. Any other report on these tests, or any report on another test, still fails the run.
known=('Patterns/CudaPersistentDecodeBarriers\.BlockSumsAreRight/[1235]'
  'CudaPersistentDecode\.Batch1StepsEqualTheLaunchesBitForBit'
  'CudaPersistentDecode\.ExactStepsEqualASingleShotPrefillAndPlainOnesDoNot'
  'CudaPersistentDecode\.AChangedTokenShowsInTheStepsRows')
racecheck_known="^($(IFS='|'; echo "${known[*]}"))\$"
"$bin" --gtest_list_tests --gtest_filter="$filter" | awk '/^[^ ]/{s=$1} /^  /{print s $1}' > "$work/all"
# The longest under racecheck on the H200 (session 14: the SSD scans' 80-305 s first, then the
# model-level and large-GEMM suites), started in this order so that the short ones fill in after them.
heavy=(CudaSsdTiling CudaSsdStep CudaSsdTc CudaSsd CudaMoe Models/CudaTensorParallel CudaForcedRouting
  CudaFusedModel CudaHybridModel CudaGraphs CudaAttention CudaGemmGemv CudaModel CudaStepProfile
  CudaTensorParallelCollective CudaGemm CudaGemmSwapAb CudaGemmWgmma CudaGemmSkinny CudaGemmGrouped)
{ for h in "${heavy[@]}"; do grep "^$h\\." "$work/all"; done
  grep -vE "^($(IFS='|'; echo "${heavy[*]}"))\\." "$work/all"; } > "$work/list"
one() {  # one TEST: a line for it
  local t=$1 log; log=$work/$(echo "$t" | tr '/' '_').log
  local api=(); [[ $t == *Nccl* ]] && api=(--report-api-errors no)
  local s=$SECONDS
  timeout --kill-after=10 "$limit" compute-sanitizer --tool "$tool" "${api[@]}" --error-exitcode 3 "$bin" \
    --gtest_filter="$t" > "$log" 2>&1
  local rc=$? r
  # The tool's own reports (not its banner, summary or a report's indented detail lines).
  local reports; reports=$(grep -E '^========= [^ ]' "$log" | grep -cvE 'COMPUTE-SANITIZER|ERROR SUMMARY|LEAK SUMMARY')
  case $rc in
    0) r=clean ;;
    3) r=FOUND
       local races='Error: (Race reported between|Potential (RAW|WAR|WAW) hazard)'
       if [ "$tool" = racecheck ] && [[ $t =~ $racecheck_known ]] && grep -q '^\[  PASSED  \] 1 test' "$log" &&
          ! grep -E '^========= (Error|Warning):' "$log" | grep -qvE "$races"; then
         r=known
       fi ;;
    124|137) r="TIMEOUT ($reports reports so far)" ;;
    *) if grep -q 'before first instrumented API call' "$log" && grep -q '^\[  PASSED  \] 1 test' "$log"; then
         r=host-only
       else
         r="FAILED rc=$rc"
       fi ;;
  esac
  echo "$r $((SECONDS - s))s $t"
}
export -f one; export tool bin limit work racecheck_known
xargs -a "$work/list" -P "$par" -I{} bash -c 'one "$@"' _ {} | tee "$work/summary"
n=$(wc -l < "$work/list")
echo "== $tool: $(grep -c '^clean' "$work/summary") clean, $(grep -c '^host-only' "$work/summary") host-only," \
  "$(grep -c '^known' "$work/summary") known," \
  "$(grep -c '^TIMEOUT' "$work/summary") timeout, $(grep -c '^FOUND' "$work/summary") found," \
  "$(grep -c '^FAILED' "$work/summary") failed, of $n tests (limit ${limit}s, $par at a time)"
for t in $(grep -E '^(FOUND|FAILED|TIMEOUT)' "$work/summary" | awk '{print $NF}' | head -5); do
  echo "== $t"; grep -v '^\[' "$work/$(echo "$t" | tr '/' '_').log" | head -40
done
[[ $(wc -l < "$work/summary") -eq $n ]] || echo "== $((n - $(wc -l < "$work/summary"))) tests did not report"
! grep -qE '^(FOUND|FAILED|TIMEOUT)' "$work/summary" && [[ $(wc -l < "$work/summary") -eq $n ]]
