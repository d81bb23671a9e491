#!/usr/bin/env bash
# scripts/gpu-opt-in.sh BIN_DIR [MAMBA_SSM_DIR] — one device call (under ten minutes) for the tensor-core scan's
# opt-in ways that have been compiled but not yet run on a GPU (docs/performance.md, "Session 53"): each way is
# benched beside the default in the same process, then its tests, verify end to end, the kernels' timeline and
# racecheck, in order of value, so a call cut short still has the figures. BIN_DIR holds parity,
# parity_gpu_tests and parity_gpu_bench (a build folder, or a bundle's bins/NAME after
# `source scripts/gpu-bundle.sh unpack DIR`); MAMBA_SSM_DIR, if given, runs mamba_ssm's chunk scan in the same call
# (bench/cuda/mamba_ssm_reference.py). Prints everything; exits non-zero if a test or verify fails. A way becomes a
# default only where it pays here and passes every step.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${1:?folder with parity, parity_gpu_tests and parity_gpu_bench}
mamba=${2:-}
export PARITY_TEST_DATA=${PARITY_TEST_DATA:-$PWD/tests/data}
fail=0
step() { echo; echo "== $*"; "$@" || { echo "FAILED: $*"; fail=1; }; }
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader || true

# 1. Speed, each way beside the default in one process: the default pass, the programmatic launches (both on a
# stream of their own), four cells a round against three, one launch for the band and tables against two.
ways='BM_CudaSsdTcPrefillDevice/(1|8)/16/'
ways+='|BM_CudaSsdTcPrefillProgrammatic/(1|8)/16/'
ways+='|BM_CudaSsdTcPrefillRelay/(1|2)/16/(3|4)/0/(1|2|4)'
ways+='|BM_CudaSsdTcPrefillTables/(1|8)/16/'
step "$bin/parity_gpu_bench" --benchmark_min_time=0.1 --benchmark_filter="$ways"
[ -n "$mamba" ] && step python3 bench/cuda/mamba_ssm_reference.py --mamba-ssm "$mamba"

# 2. The bits: every tensor-core scan test, the new ways' included.
step "$bin/parity_gpu_tests" --gtest_filter='CudaSsdTc.*'

# 3. Exact mode end to end with the model's passes launched programmatically (both levels), both products.
for p in bfloat16 split; do
  step "$bin/parity" verify builtin:mamba2-130m --device cuda --scan-products "$p"
  for level in programmatic programmatic-band; do
    step env PARITY_CUDA_TC_LAUNCH=$level "$bin/parity" verify builtin:mamba2-130m --device cuda --scan-products "$p"
  done
done

# 4. Where the time goes, kernel by kernel (the leads show how early a programmatic launch began), and a second
# bench pass for the noise.
step "$bin/parity_gpu_bench" --benchmark_filter='BM_CudaSsdTcTimeline/1/0/'
step "$bin/parity_gpu_bench" --benchmark_min_time=0.1 --benchmark_filter="$ways"

# 5. Racecheck on the new ways' tests (shared memory: the C stages at four cells, the one launch's reuse of its
# staging for the tables' scratch).
if command -v compute-sanitizer >/dev/null; then
  step scripts/sanitize-gpu.sh racecheck "$bin/parity_gpu_tests" 240 3 \
    'CudaSsdTc.TheRelayHasTheWalksBits:CudaSsdTc.TheOneLaunchTablesHaveTheTwoLaunchesBits:CudaSsdTc.ProgrammaticLaunchesHaveTheOrdinaryBits'
else
  echo "compute-sanitizer not found: racecheck not run"
fi
exit $fail
