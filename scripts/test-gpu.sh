#!/usr/bin/env bash
# scripts/test-gpu.sh [BUILD_DIR] — on a machine with an NVIDIA GPU: the GPU tests (label gpu), the
# same kernel tests under compute-sanitizer (memcheck, racecheck), `parity verify --device cuda` on
# the built-in models and the committed fixtures, and the GPU benchmarks. The build may come from
# another machine (scripts/build.sh with nvcc; carry the folder): PARITY_TEST_DATA points the tests
# at this checkout's fixtures. Prints everything; exits non-zero if a test or verify fails.
set -uo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
export PARITY_TEST_DATA=${PARITY_TEST_DATA:-$PWD/tests/data}
fail=0
step() { echo; echo "== $*"; "$@" || { echo "FAILED: $*"; fail=1; }; }
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
step "$dir/parity_gpu_tests"
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    step compute-sanitizer --tool "$tool" --error-exitcode 3 "$dir/parity_gpu_tests" \
      --gtest_filter='CudaGemm.AgreesWithTheCpuScalarTwin:CudaConv1d.*:CudaNorms.*:CudaSsd.Both*:CudaSsdStep.PlainSsu*:CudaSsdStep.ExactDecodeAtTheMixerShape*:CudaModel.Probes*:CudaAttention.RopeKvAppend*:CudaMoe.TopkSoftmax*:CudaMoe.DenseRouting*:CudaMoe.BlockEquals*:CudaHybridModel.RouterProbe*:CudaGemmGrouped.*'
  done
else
  echo "compute-sanitizer not found: memcheck/racecheck not run"
fi
for m in builtin:tiny builtin:mamba2-130m tests/data/mamba2_g1 tests/data/mamba2_g2 builtin:tiny-hybrid tests/data/granite_hybrid builtin:granite-h-bench; do
  step "$dir/parity" verify "$m" --device cuda
done
for m in builtin:tiny-hybrid tests/data/granite_hybrid; do  # the MoE's other router-override pattern
  step "$dir/parity" verify "$m" --device cuda --moe-routing fused
done
# Tensor parallelism: two GPU ranks (on one GPU both share it, host-staged; with two, NCCL).
for m in builtin:tiny-g2 tests/data/mamba2_g2 builtin:tiny-hybrid-g2; do
  step "$dir/parity" verify "$m" --device cuda --tensor-parallel-size 2
done
step "$dir/parity_gpu_bench" --benchmark_min_time=0.2 ${PARITY_GPU_BENCH_FILTER:+--benchmark_filter=$PARITY_GPU_BENCH_FILTER}
exit $fail
