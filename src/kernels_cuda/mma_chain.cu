// BM_CudaMmaChain's kernels (mma_chain.h): one dependent chain of tensor-core steps per warp or
// warpgroup, timed with the SM's clock from before the first step to after the last result.
#include "kernels_cuda/mma_chain.h"

#include <cstdint>
#include <vector>

#include "common/error.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/wgmma.cuh"

namespace parity::cuda {
namespace {

// A 64-row box of 64-deep bf16 rows (the weights' side) and an 8-row one (the activations'), in the
// 128-byte swizzle's alignment; filled with small values so that 5120 products stay finite.
constexpr int kWBox = 64 * 128, kXBox = 8 * 128, kSmem = kWBox + kXBox + 1024;

__device__ __forceinline__ long long clock_after(float v) {
  // The mov waits for v (the chain's last result); the clock is read after it (volatile asm keeps the order).
  unsigned u;
  asm volatile("mov.b32 %0, %1;\n" : "=r"(u) : "r"(__float_as_uint(v)));
  long long t;
  asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t) : "r"(u));
  return t;
}

__device__ __forceinline__ long long clock_now() {
  long long t;
  asm volatile("mov.u64 %0, %%clock64;\n" : "=l"(t));
  return t;
}

template <int WAY>
__global__ void chain_kernel(long long* cycles, float* sink) {
  constexpr int steps = kMmaChainSteps;
  extern __shared__ unsigned char smem_raw[];
  const unsigned base = (ptx::smem_addr(smem_raw) + 1023u) & ~1023u;
  unsigned char* box = smem_raw + (base - ptx::smem_addr(smem_raw));
  for (int i = threadIdx.x; i < (kWBox + kXBox) / 4; i += blockDim.x)
    reinterpret_cast<unsigned*>(box)[i] = 0x3A833A83u;  // bf16 ~0.001 in both halves
  ptx::fence_proxy_async();
  __syncthreads();
  const int lane = threadIdx.x % 32;
  float last = 0.0f;
  long long t0 = 0, t1 = 0;
  if constexpr (WAY == 0 || WAY == 1) {
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    unsigned a[4][4], b[4][2];
    const int wr = lane % 16, xr = lane % 8;
    auto read = [&](unsigned (&fa)[4][4], unsigned (&fb)[4][2]) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) ptx::ldmatrix_x4(base + wr * 128 + (((2 * kk + lane / 16) ^ (wr & 7)) << 4), fa[kk]);
#pragma unroll
      for (int p = 0; p < 2; ++p) {
        unsigned r[4];
        ptx::ldmatrix_x4(base + kWBox + xr * 128 + (((4 * p + lane / 8) ^ xr) << 4), r);
        fb[2 * p][0] = r[0];
        fb[2 * p][1] = r[1];
        fb[2 * p + 1][0] = r[2];
        fb[2 * p + 1][1] = r[3];
      }
    };
    read(a, b);
    __syncwarp();
    t0 = clock_now();
    if constexpr (WAY == 0) {
      for (int s = 0; s < steps; s += 4) {
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) ptx::mma_bf16(acc, a[kk], b[kk]);
      }
    } else {
      unsigned na[4][4], nb[4][2];
      for (int s = 0; s < steps; s += 4) {
        ptx::mma_bf16(acc, a[0], b[0]);
        read(na, nb);  // the next box's fragments, while the chain runs
        ptx::mma_bf16(acc, a[1], b[1]);
        ptx::mma_bf16(acc, a[2], b[2]);
        ptx::mma_bf16(acc, a[3], b[3]);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
          for (int i = 0; i < 4; ++i) a[kk][i] = na[kk][i];
          b[kk][0] = nb[kk][0];
          b[kk][1] = nb[kk][1];
        }
      }
    }
    t1 = clock_after(acc[0]);
    last = acc[0] + acc[1] + acc[2] + acc[3];
  } else {
    float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    wgmma::fence_operands(d);
    t0 = clock_now();
    if constexpr (WAY == 2) {
      for (int s = 0; s < steps; s += 4) {
        wgmma::fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk)
          wgmma::mma_ss<8>(d, wgmma::desc_k_sw128(base + 32 * kk), wgmma::desc_k_sw128(base + kWBox + 32 * kk));
        wgmma::commit_group();
        wgmma::fence_operands(d);
        wgmma::wait_group<1>();
        wgmma::fence_operands(d);
      }
    } else {
      // Straight-line code: a loop's back edge makes the compiler fence the accumulators between steps.
      wgmma::fence();
#pragma unroll
      for (int s = 0; s < steps; ++s)
        wgmma::mma_ss<8>(d, wgmma::desc_k_sw128(base + 32 * (s & 3)), wgmma::desc_k_sw128(base + kWBox + 32 * (s & 3)));
      wgmma::commit_group();
    }
    wgmma::fence_operands(d);
    wgmma::wait_group<0>();
    wgmma::fence_operands(d);
    t1 = clock_after(d[0]);
    last = d[0] + d[1] + d[2] + d[3];
  }
  const int chains_per_block = (WAY <= 1 ? blockDim.x / 32 : blockDim.x / 128);
  const int chain = WAY <= 1 ? threadIdx.x / 32 : threadIdx.x / 128;
  const bool leader = WAY <= 1 ? lane == 0 : threadIdx.x % 128 == 0;
  if (leader) cycles[blockIdx.x * chains_per_block + chain] = t1 - t0;
  if (last == 12345.0f) sink[0] = last;  // keeps the chain
}

}  // namespace

const char* mma_chain_way_name(int way) {
  static const char* const names[kMmaChainWays] = {"mma.sync registers", "mma.sync ldmatrix a box ahead",
                                                   "wgmma m64n8 4-step groups", "wgmma m64n8 one group"};
  return way >= 0 && way < kMmaChainWays ? names[way] : "?";
}

MmaChainResult mma_chain(int way, int warps, int blocks) {
  constexpr int steps = kMmaChainSteps;
  if (way < 0 || way >= kMmaChainWays || warps < 1 || blocks < 1) throw Error("mma_chain: no such way");
  const bool wg = way >= 2;
  if (warps > (wg ? 2 : 8)) throw Error("mma_chain: too many chains a block");
  const int threads = wg ? 128 * warps : 32 * warps, chains = blocks * warps;
  DeviceBuffer<long long> cycles(static_cast<std::size_t>(chains));
  DeviceBuffer<float> sink(1);
  void (*kernels[kMmaChainWays])(long long*, float*) = {chain_kernel<0>, chain_kernel<1>, chain_kernel<2>,
                                                             chain_kernel<3>};
  cudaEvent_t a, b;
  cuda_check(cudaEventCreate(&a), "cudaEventCreate");
  cuda_check(cudaEventCreate(&b), "cudaEventCreate");
  kernels[way]<<<blocks, threads, kSmem>>>(cycles.data(), sink.data());  // warm-up
  check_launch("mma_chain");
  cudaEventRecord(a);
  kernels[way]<<<blocks, threads, kSmem>>>(cycles.data(), sink.data());
  cudaEventRecord(b);
  cuda_check(cudaEventSynchronize(b), "mma_chain");
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::vector<long long> host(static_cast<std::size_t>(chains));
  cuda_check(cudaMemcpy(host.data(), cycles.data(), host.size() * sizeof(long long), cudaMemcpyDeviceToHost),
             "mma_chain copy");
  double sum = 0;
  for (long long c : host) sum += static_cast<double>(c);
  return {sum / static_cast<double>(chains) / steps, ms};
}

}  // namespace parity::cuda
