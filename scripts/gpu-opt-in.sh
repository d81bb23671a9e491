#!/usr/bin/env bash
# scripts/gpu-opt-in.sh BIN_DIR [MAMBA_SSM_DIR] — one device call (under ten minutes) for the tensor-core scan's
# newest ways (today session 54's call, docs/performance.md, "Session 54": the programmatic level on the legacy
# stream, now the default, and the lean relay; edit the bench filter and the tests for the next opt-in): each way
# is benched beside the default in the same process, then its tests, verify end to end and
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

# 1. Speed, each way beside the default in one process: the default pass on the legacy stream (its launches at the
# process's level), the programmatic levels on a stream of their own, the lean relay against the relay as it has run.
ways='BM_CudaSsdTcPrefillDevice/(1|2|8|32)/16/'
ways+='|BM_CudaSsdTcPrefillProgrammatic/(1|8)/16/0/'
ways+='|BM_CudaSsdTcPrefillLean/'
step "$bin/parity_gpu_bench" --benchmark_min_time=0.1 --benchmark_filter="$ways"
[ -n "$mamba" ] && step python3 bench/cuda/mamba_ssm_reference.py --mamba-ssm "$mamba"

# 2. The bits: every tensor-core scan test (the lean relay's, and level 2 on the legacy stream, included), and the
# model tests that take the scan's products.
step "$bin/parity_gpu_tests" --gtest_filter='CudaSsdTc.*:CudaSsd.*:CudaModel.*Products*:CudaModel.ExactModeKeeps*'

# 3. Exact mode end to end, both products, with the model's passes at each programmatic level.
for p in bfloat16 split; do
  for level in ordinary programmatic-band; do
    step env PARITY_CUDA_TC_LAUNCH=$level "$bin/parity" verify builtin:mamba2-130m --device cuda --scan-products "$p"
  done
done

# 4. A second bench pass for the noise.
step "$bin/parity_gpu_bench" --benchmark_min_time=0.1 --benchmark_filter="$ways"

# 5. Racecheck on the lean relay's test (its buffers found from round and slot).
if command -v compute-sanitizer >/dev/null; then
  step scripts/sanitize-gpu.sh racecheck "$bin/parity_gpu_tests" 240 3 'CudaSsdTc.TheLeanRelayHasTheWalksBits'
else
  echo "compute-sanitizer not found: racecheck not run"
fi
exit $fail
