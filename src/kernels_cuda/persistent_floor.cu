// persistent_floor.h: a batch-1 decode step's weight reads as one persistent kernel (benchmarks only).
#include "kernels_cuda/persistent_floor.h"

#include <cstdint>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/grid_barrier.cuh"
#include "kernels_cuda/launch_support.h"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/weight_read.cuh"

namespace parity::cuda {
namespace {

constexpr int kThreads = 512, kUnroll = 8;
constexpr unsigned kMaxSmemBytes = 220 * 1024;

// A piece of latency-bound work: thread 0 busy for `us` while the block waits, as the block doing an
// SSM step or a norm would keep the others waiting at the barrier after it.
__device__ void busy(float us) {
  if (us <= 0.f) return;
  if (threadIdx.x == 0) {
    const unsigned long long t0 = ptx::global_timer_ns(), ns = static_cast<unsigned long long>(us * 1000.f);
    while (ptx::global_timer_ns() - t0 < ns) {
    }
  }
  __syncthreads();
}

// This block's share of n 16-byte words at p (the blocks split them into contiguous slices).
__device__ unsigned read_share(const uint4* p, std::size_t n) {
  const std::size_t share = n / gridDim.x;
  return read_words<kUnroll>(p + share * blockIdx.x, share, threadIdx.x, kThreads);
}

__global__ void __launch_bounds__(kThreads, 1)
    persistent_step_kernel(const uint8_t* __restrict__ w, PersistentFloorStep st, unsigned* count, unsigned* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ std::uint64_t landed;
  const std::size_t out_share = st.out_bytes / gridDim.x / 16 * 16;  // a bulk copy moves multiples of 16
  if (threadIdx.x == 0) {
    ptx::mbar_init(&landed, 1);
    ptx::mbar_init_fence();
  }
  __syncthreads();
  unsigned target = 0, h = 0, phase = 0;
  const std::size_t layer_bytes = st.in_bytes + st.out_bytes;
  for (int l = 0; l < st.layers; ++l) {
    const uint8_t* in_w = w + l * layer_bytes;
    const uint8_t* out_w = in_w + st.in_bytes;
    // in_proj (the layer norm before it is the previous layer's last piece), its epilogue the conv.
    h ^= read_share(reinterpret_cast<const uint4*>(in_w), st.in_bytes / 16);
    if (st.out_in_smem && threadIdx.x == 0) {
      // The block's out_proj share lands while in_proj ends and the small work runs (the copy
      // engine writes it; the last phase's reads of it are ordered before by the barriers).
      ptx::fence_proxy_async();
      ptx::mbar_arrive_expect_tx(&landed, static_cast<unsigned>(out_share));
      ptx::bulk_copy(smem, out_w + out_share * blockIdx.x, static_cast<unsigned>(out_share), &landed);
    }
    grid_barrier(count, target);  // the SSM step reads every channel's conv output
    busy(st.ssm_us);
    grid_barrier(count, target);  // the gated norm reads every head's output
    busy(st.gated_norm_us);       // each block normalises the whole row for its out_proj columns
    if (st.next_l2_bytes > 0 && l + 1 < st.layers && threadIdx.x == 0) {
      const std::size_t share = st.next_l2_bytes / gridDim.x / 16 * 16;
      // read_share's slice of the next in_proj, rounded down to the 16 bytes a bulk prefetch needs.
      const uint8_t* next = in_w + layer_bytes + (st.in_bytes / 16 / gridDim.x) * 16 * blockIdx.x;
      for (std::size_t o = 0; o < share; o += 65536) {
        const unsigned n = static_cast<unsigned>(share - o < 65536 ? share - o : 65536);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(next + o), "r"(n) : "memory");
      }
    }
    if (st.out_in_smem) {
      ptx::mbar_wait(&landed, phase);
      phase ^= 1u;
      const uint4* s = reinterpret_cast<const uint4*>(smem);
      for (std::size_t i = threadIdx.x; i < out_share / 16; i += kThreads) h ^= s[i].x ^ s[i].w;
      busy(st.out_chain_us);  // out_proj's K/16 dependent tensor-core steps
    } else {
      h ^= read_share(reinterpret_cast<const uint4*>(out_w), st.out_bytes / 16);
    }
    grid_barrier(count, target);  // the next layer's norm reads the whole residual row
    busy(st.norm_us);
  }
  h ^= read_share(reinterpret_cast<const uint4*>(w + st.layers * layer_bytes), st.head_bytes / 16);
  if (h == 0x9e3779b9u) *sink = h;  // keeps the reads
}

}  // namespace

bool persistent_floor_step(const void* weights, const PersistentFloorStep& step, unsigned* barrier,
                           unsigned* sink, cudaStream_t s) {
  const int sms = sm_count();
  const std::size_t smem = step.out_in_smem ? step.out_bytes / sms / 16 * 16 : 0;
  if (smem > kMaxSmemBytes) return false;
  cuda_check(cudaFuncSetAttribute(persistent_step_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  static_cast<int>(kMaxSmemBytes)),
             "cudaFuncSetAttribute");
  int per_sm = 0;
  cuda_check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, persistent_step_kernel, kThreads, smem),
             "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  if (per_sm < 1) return false;
  cuda_check(cudaMemsetAsync(barrier, 0, sizeof(unsigned), s), "cudaMemsetAsync");
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(sms));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;  // every block resident at once: the barriers need it
  attr[0].val.cooperative = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cuda_check(
      cudaLaunchKernelEx(&cfg, persistent_step_kernel, static_cast<const uint8_t*>(weights), step, barrier, sink),
      "persistent_step");
  return true;
}

}  // namespace parity::cuda
