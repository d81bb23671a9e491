// Two tensor-core instructions computing the same K-chain, for cuda_wgmma_bits_test.cpp: mma.sync
// m16n8k16 (what every parity GEMM kernel issues) and Hopper's wgmma m64n8k16 with A in registers
// and B from a shared-memory descriptor (what a WGMMA/TMA GEMM would issue). If they accumulate
// with the same bits, a faster many-rows kernel on wgmma can sit beside the mma.sync kernels
// without breaking batch invariance.
#include <cuda_bf16.h>

#include <cstdint>
#include <vector>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ptx.cuh"
#include "kernels_cuda/wgmma.cuh"
#include "tests/cuda/wgmma_chain.h"

namespace parity::test {
namespace {

__device__ inline uint32_t pack(const uint16_t* p) { return uint32_t(p[0]) | (uint32_t(p[1]) << 16); }

// m16n8k16's A fragment of rows 16w.. of A [64][K] at k0, as ldmatrix would give it.
__device__ inline void a_fragment(const uint16_t* A, int K, int k0, int w, int lane, uint32_t (&ra)[4]) {
  const int g = lane / 4, q = lane % 4;
  const uint16_t* a = A + static_cast<std::size_t>(16 * w) * K + k0;
  ra[0] = pack(a + g * K + 2 * q);
  ra[1] = pack(a + (g + 8) * K + 2 * q);
  ra[2] = pack(a + g * K + 2 * q + 8);
  ra[3] = pack(a + (g + 8) * K + 2 * q + 8);
}

__device__ inline void store(float* D, int w, int lane, const float (&d)[4]) {
  const int g = lane / 4, q = lane % 4, r0 = 16 * w + g;
  D[r0 * 8 + 2 * q] = d[0];
  D[r0 * 8 + 2 * q + 1] = d[1];
  D[(r0 + 8) * 8 + 2 * q] = d[2];
  D[(r0 + 8) * 8 + 2 * q + 1] = d[3];
}

// reverse: the 16-deep steps in descending k (a different chain: the companion).
__global__ void mma_chain_kernel(const uint16_t* A, const uint16_t* Bt, int K, bool reverse, float* D) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  float d[4] = {0, 0, 0, 0};
  for (int s = 0; s < K / 16; ++s) {
    const int k0 = 16 * (reverse ? K / 16 - 1 - s : s);
    uint32_t ra[4];
    a_fragment(A, K, k0, w, lane, ra);
    const uint16_t* b = Bt + static_cast<std::size_t>(g) * K + k0;
    const uint32_t rb0 = pack(b + 2 * q), rb1 = pack(b + 2 * q + 8);
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb0), "r"(rb1));
  }
  store(D, w, lane, d);
}

// B's 16×8 step in shared memory as two 8×8 core matrices (8 rows of n, 16 bytes of k each) 128 bytes
// apart along k: the no-swizzle K-major layout, leading byte offset 128.
__device__ inline uint64_t b_descriptor(const void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return uint64_t((addr >> 4) & 0x3FFF) | (uint64_t(128 >> 4) << 16) | (uint64_t(256 >> 4) << 32);
}

__global__ void wgmma_chain_kernel(const uint16_t* A, const uint16_t* Bt, int K, float* D) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ __align__(128) uint16_t Bs[2][8][8];
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  float d[4] = {0, 0, 0, 0};
  for (int k0 = 0; k0 < K; k0 += 16) {
    __syncthreads();
    for (int e = threadIdx.x; e < 128; e += blockDim.x) {
      const int kb = e / 64, n = (e / 8) % 8, kk = e % 8;
      Bs[kb][n][kk] = Bt[static_cast<std::size_t>(n) * K + k0 + kb * 8 + kk];
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic stores, then the async proxy reads
    __syncthreads();
    uint32_t ra[4];
    a_fragment(A, K, k0, w, lane, ra);
    const uint64_t db = b_descriptor(&Bs[0][0][0]);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "l"(db), "r"(k0 > 0 ? 1 : 0));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
  }
  store(D, w, lane, d);
#endif
}

// ---- The operands' roles swapped (the swap-AB GEMM, gemm_swap_ab.cu): D[16][64] = X[16][K] · W[64][K]ᵀ.
// mma.sync takes X as its m16 'A' side and W as eight n8 'B' tiles (what the mma.sync kernels do);
// wgmma takes W as its m64 A operand and X as its n16 B operand, both from shared memory through
// wgmma.cuh's descriptors in the 128-byte swizzle, and computes D' = Dᵀ.

// Warp w: the n8 tiles 2w and 2w + 1 (columns 16w..16w+15 of D).
__global__ void mma_swap_chain_kernel(const uint16_t* X, const uint16_t* W, int K, float* D) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  float d[2][4] = {};
  for (int k0 = 0; k0 < K; k0 += 16) {
    uint32_t ra[4];
    a_fragment(X, K, k0, 0, lane, ra);
    for (int t = 0; t < 2; ++t) {
      const uint16_t* b = W + static_cast<std::size_t>(16 * w + 8 * t + g) * K + k0;
      const uint32_t rb0 = pack(b + 2 * q), rb1 = pack(b + 2 * q + 8);
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
          : "+f"(d[t][0]), "+f"(d[t][1]), "+f"(d[t][2]), "+f"(d[t][3])
          : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb0), "r"(rb1));
    }
  }
  for (int t = 0; t < 2; ++t)
    for (int e = 0; e < 4; ++e) D[(g + 8 * (e / 2)) * 64 + 16 * w + 8 * t + 2 * q + e % 2] = d[t][e];
}

// Element (r, k) of a 64-deep box of rows in the 128-byte swizzle the TMA unit writes (tensor_map.h):
// 128 bytes a row, 16-byte chunk c of row r at chunk c ^ (r % 8).
__device__ inline int swizzled(int r, int k) { return r * 64 + (((k / 8) ^ (r % 8)) * 8) + k % 8; }

// reverse: the k16 steps in descending k (the companion).
__global__ void wgmma_swap_chain_kernel(const uint16_t* X, const uint16_t* W, int K, bool reverse, float* D) {
  __shared__ __align__(1024) uint16_t Ws[64 * 64];
  __shared__ __align__(1024) uint16_t Xs[16 * 64];
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
  float d[8];
  for (float& x : d) x = 0.0f;  // zeroed in registers: every step accumulates (wgmma.cuh)
  const unsigned ws = static_cast<unsigned>(__cvta_generic_to_shared(Ws));
  const unsigned xs = static_cast<unsigned>(__cvta_generic_to_shared(Xs));
  for (int b = 0; b < K / 64; ++b) {
    const int k0 = 64 * (reverse ? K / 64 - 1 - b : b);
    __syncthreads();  // the last box's wgmma are complete (wait_group 0 below) in every warp
    for (int e = threadIdx.x; e < 64 * 64; e += blockDim.x)
      Ws[swizzled(e / 64, e % 64)] = W[static_cast<std::size_t>(e / 64) * K + k0 + e % 64];
    for (int e = threadIdx.x; e < 16 * 64; e += blockDim.x)
      Xs[swizzled(e / 64, e % 64)] = X[static_cast<std::size_t>(e / 64) * K + k0 + e % 64];
    cuda::ptx::fence_proxy_async();  // generic stores, then the async proxy reads
    __syncthreads();
    cuda::wgmma::fence();
    for (int s = 0; s < 4; ++s) {
      const int kk = reverse ? 3 - s : s;
      cuda::wgmma::mma_ss<16>(d, cuda::wgmma::desc_k_sw128(ws + 32 * kk), cuda::wgmma::desc_k_sw128(xs + 32 * kk));
    }
    cuda::wgmma::commit_group();
    cuda::wgmma::wait_group<0>();
    cuda::wgmma::fence_operands(d);
  }
  // d[4j + 2h + e]: row 16w + g + 8h of D' (a column n of D), column 8j + 2q + e of D' (a row m of D).
  for (int j = 0; j < 2; ++j)
    for (int h = 0; h < 2; ++h)
      for (int e = 0; e < 2; ++e) D[(8 * j + 2 * q + e) * 64 + 16 * w + g + 8 * h] = d[4 * j + 2 * h + e];
}

}  // namespace

SwappedChains run_swapped_chains(const std::vector<uint16_t>& X, const std::vector<uint16_t>& W, int K) {
  cuda::DeviceBuffer<uint16_t> x, w;
  x.upload(X);
  w.upload(W);
  cuda::DeviceBuffer<float> d(3 * 1024);
  mma_swap_chain_kernel<<<1, 128>>>(x.data(), w.data(), K, d.data());
  wgmma_swap_chain_kernel<<<1, 128>>>(x.data(), w.data(), K, false, d.data() + 1024);
  wgmma_swap_chain_kernel<<<1, 128>>>(x.data(), w.data(), K, true, d.data() + 2048);
  cuda::check_launch("swapped wgmma chains");
  cuda::cuda_check(cudaDeviceSynchronize(), "swapped wgmma chains");
  const std::vector<float> all = d.download(3 * 1024);
  return {{all.begin(), all.begin() + 1024}, {all.begin() + 1024, all.begin() + 2048}, {all.begin() + 2048, all.end()}};
}

ChainResults run_chains(const std::vector<uint16_t>& A, const std::vector<uint16_t>& Bt, int K) {
  cuda::DeviceBuffer<uint16_t> a, b;
  a.upload(A);
  b.upload(Bt);
  cuda::DeviceBuffer<float> d(3 * 512);
  mma_chain_kernel<<<1, 128>>>(a.data(), b.data(), K, false, d.data());
  wgmma_chain_kernel<<<1, 128>>>(a.data(), b.data(), K, d.data() + 512);
  mma_chain_kernel<<<1, 128>>>(a.data(), b.data(), K, true, d.data() + 1024);
  cuda::check_launch("wgmma chains");
  cuda::cuda_check(cudaDeviceSynchronize(), "wgmma chains");
  const std::vector<float> all = d.download(3 * 512);
  return {{all.begin(), all.begin() + 512}, {all.begin() + 512, all.begin() + 1024}, {all.begin() + 1024, all.end()}};
}

}  // namespace parity::test
