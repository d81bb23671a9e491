#!/usr/bin/env bash
# scripts/test-gpu.sh [BUILD_DIR] — on a machine with an NVIDIA GPU: the GPU tests (label gpu), the
# same tests under compute-sanitizer (memcheck, racecheck; scripts/sanitize-gpu.sh), `parity verify --device cuda` on
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
# PARITY_SANITIZERS: the compute-sanitizer tools to run over the suite (default "memcheck racecheck"; empty:
# none, e.g. to fit the rest into one device call of ten minutes: the two tools take ~8 of them).
tools=${PARITY_SANITIZERS-memcheck racecheck}
if [ -z "$tools" ]; then
  echo "PARITY_SANITIZERS is empty: memcheck/racecheck not run"
elif command -v compute-sanitizer >/dev/null; then
  # Memcheck and racecheck over the whole suite, test by test in sanitizer mode (scripts/sanitize-gpu.sh:
  # a process and a time limit each, sixteen at a time by default, smaller sweeps over the same kernels; the
  # whole suite in one racecheck process took hours). On the H200 (session 14) memcheck takes ~100 s and
  # racecheck ~380 s, its longest test 305 s; on the H100 (sessions 32-33) the SSD tiling sweeps ran past
  # 300-400 s beside 15 others (74-146 s two at a time), hence 600 s a test. Nothing else on the GPU meanwhile.
  # CudaGemmEarly stays out: ~1,150 timed passes with busy-wait kernels; its GEMM paths run under the tools in
  # CudaFusedModel.EarlyGemmStartsGiveTheLogitsOfOrdinaryGemmLaunches.
  for tool in $tools; do
    step scripts/sanitize-gpu.sh "$tool" "$dir/parity_gpu_tests" "${PARITY_SANITIZE_LIMIT:-600}" \
      "${PARITY_SANITIZE_PARALLEL:-16}"
  done
else
  echo "compute-sanitizer not found: memcheck/racecheck not run"
fi
for m in builtin:tiny builtin:mamba2-130m tests/data/mamba2_g1 tests/data/mamba2_g2 builtin:tiny-hybrid tests/data/granite_hybrid builtin:granite-h-bench; do
  step "$dir/parity" verify "$m" --device cuda
done
# Exact mode with the scan's products on tensor cores (--scan-products; docs/exact-mode.md): its own identity,
# the same promise. builtin:mamba2-130m has the tensor-core walk's shape (state 128, head dimension 64).
for p in bfloat16 split; do
  step "$dir/parity" verify builtin:mamba2-130m --device cuda --scan-products "$p"
done
# The persistent decode step (off by default: kernels_cuda/persistent_decode.h) end to end: verify with it
# on, and batch-1 generations (plain, exact) whose tokens must be the launches' (the bits: CudaPersistentDecode).
step env PARITY_CUDA_PERSISTENT_DECODE=next-l2 "$dir/parity" verify builtin:mamba2-130m --device cuda
same_generation() {  # [--exact]
  local a b
  a=$("$dir/parity" generate builtin:mamba2-130m --device cuda --prompt 11,22,33 --max-tokens 48 "$@") || return 1
  b=$(PARITY_CUDA_PERSISTENT_DECODE=next-l2 "$dir/parity" generate builtin:mamba2-130m --device cuda \
        --prompt 11,22,33 --max-tokens 48 "$@") || return 1
  echo "$b"
  [ "$a" = "$b" ] || { echo "the persistent step's generation differs from the launches': $a"; return 1; }
}
step same_generation
step same_generation --exact
for m in builtin:tiny-hybrid tests/data/granite_hybrid; do  # the MoE's other router-override pattern
  step "$dir/parity" verify "$m" --device cuda --moe-routing fused
done
# Tensor parallelism: two GPU ranks (on one GPU both share it, host-staged; with two, NCCL).
for m in builtin:tiny-g2 tests/data/mamba2_g2 builtin:tiny-hybrid-g2; do
  step "$dir/parity" verify "$m" --device cuda --tensor-parallel-size 2
done
# The benchmarks behind docs/performance.md's tables (a few minutes; the whole suite, with every few-rows
# variant and the two-model TP benchmark, takes far longer): PARITY_GPU_BENCH_FILTER=. runs everything.
# Two passes, the end-to-end decode and its floors first: a device call cut short by its time limit still
# has the decode target's figures (Google Benchmark runs in registration order, whatever the filter's).
first_filter='BM_CudaModelDecode/batch:(1|64|256)/exact:[01]/graphs:1/fused:1/pdl:1/gemm:(0|35)/'
first_filter+='|BM_CudaStreamFloor/small:1/early:1|BM_CudaPersistentFloor/work:0/|BM_CudaPersistentDecode/persistent:(0|1|50)/exact:[01]/bf16:1/trace:0'
first_filter+='|BM_CudaDecodeParts/batch:1/exact:[01]/skip:0/gemm:35/gemmfuse:(4|5|13|21|29)/'  # session 34: the conv epilogue's gate
first_filter+='|BM_CudaDecodeTimeline/batch:1/exact:[01]/gemm:35/gemmfuse:4/skip:0/'  # session 36: each kernel's share of the step's path
default_filter='BM_CudaGemm/(1|16|64|4096)/|BM_CudaMoeGroupedGemm|BM_CudaMoe/|BM_CudaDecodeSsm/(1|64|256)/(0|16)/'
default_filter+='|BM_CudaGemmRounded/(1|8|16|32|48|64)/[012]/35/'  # session 39: as a step calls it, beside cuBLAS's cold rows
default_filter+='|BM_CudaSsdPrefill/(1|8|32)/(16|32|64|256)/|BM_CudaModelPrefill|BM_CudaHybridPrefill/8/2048'
default_filter+='|BM_CudaHybridDecode/batch:(1|64|256)/exact:[01]/model:1/graphs:1|BM_CudaPersistentFloor|BM_CudaPersistentDecode'
default_filter+='|BM_CudaDecodeSsmTc/|BM_CudaModelDecodeProducts/'  # session 44: --scan-products' decode beside fp32's
if [ -n "${PARITY_GPU_BENCH_FILTER:-}" ]; then
  step "$dir/parity_gpu_bench" --benchmark_min_time=0.05 --benchmark_filter="$PARITY_GPU_BENCH_FILTER"
else
  step "$dir/parity_gpu_bench" --benchmark_min_time=0.05 --benchmark_filter="$first_filter"
  step "$dir/parity_gpu_bench" --benchmark_min_time=0.05 --benchmark_filter="$default_filter"
fi
if python3 -c 'import torch' 2>/dev/null; then step python3 bench/cuda/cublas_reference.py  # cuBLAS beside ours
else echo "PyTorch not found: cublas_reference.py (the cuBLAS baseline) not run"; fi
# mamba_ssm's Triton kernels (vLLM's are adapted from them) beside ours: PARITY_MAMBA_SSM names a folder
# holding a fetched mamba_ssm/ops/triton (bench/cuda/mamba_ssm_reference.py says which files); not committed.
if [ -n "${PARITY_MAMBA_SSM:-}" ]; then step python3 bench/cuda/mamba_ssm_reference.py --mamba-ssm "$PARITY_MAMBA_SSM"
else echo "PARITY_MAMBA_SSM not set: mamba_ssm_reference.py (the Triton SSD / SSU baseline) not run"; fi
exit $fail
