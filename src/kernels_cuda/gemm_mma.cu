// The many-rows bf16 GEMM: mma.sync tensor-core tiles fed by a two-stage shared-memory pipeline
// (weights by cp.async, activations through registers where they are rounded to bf16).
//
// Bits: every output element is the one chain the other bf16 kernels in gemm.cu compute — K in
// 16-deep tensor-core steps, ascending, into one fp32 accumulator starting at 0, bias added once at
// the end. A 16×16×16 WMMA step is two m16n8k16 instructions on this hardware, so the tile shape
// chosen below (by M and N, never by timing) changes no bit; tests/cuda/cuda_gemm_test.cpp compares
// every M from 1 to 4096 across the kernels.
#include <cuda_bf16.h>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/gemm_mma.h"

namespace parity::cuda {
namespace {

constexpr int kThreads = 256;  // 8 warps: 2 along M × 4 along N
constexpr int kTK = 32;        // K per pipeline stage: two 16-deep steps
constexpr int kRow = kTK + 8;  // bf16 per shared row: 80 bytes keep ldmatrix's 8 rows on distinct banks

__device__ inline void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ inline void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ inline void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ inline void ldmatrix_x4(const void* smem, unsigned (&r)[4]) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ inline void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// MI m16 tiles × NI n8 tiles per warp: a block covers (32·MI) rows × (32·NI) columns.
template <int MI, int NI>
__global__ void __launch_bounds__(kThreads) gemm_bf16_mma_kernel(const float* __restrict__ A, int M, int K, int lda,
                                                                 const __nv_bfloat16* __restrict__ W, int w_rows,
                                                                 int N, const float* __restrict__ bias,
                                                                 float* __restrict__ C, int ldc) {
  static_assert(NI % 2 == 0, "B fragments load two n8 tiles at a time");
  constexpr int BM = 32 * MI, BN = 32 * NI;
  constexpr int kALoads = BM * kTK / 4 / kThreads;  // float4 per thread per stage
  constexpr int kWLoads = BN * kTK / 8 / kThreads;  // 16-byte chunks per thread per stage
  __shared__ __align__(128) __nv_bfloat16 As[2][BM][kRow];
  __shared__ __align__(128) __nv_bfloat16 Ws[2][BN][kRow];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int wm = (warp / 4) * (16 * MI), wn = (warp % 4) * (8 * NI);

  float acc[MI][NI][4];
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j)
      for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.0f;

  float4 a_next[kALoads];
  auto load_a = [&](int k0) {
    for (int i = 0; i < kALoads; ++i) {
      const int idx = tid + kThreads * i, r = idx / (kTK / 4), c = (idx % (kTK / 4)) * 4, gm = m0 + r;
      a_next[i] = gm < M ? *reinterpret_cast<const float4*>(A + static_cast<std::size_t>(gm) * lda + k0 + c)
                         : make_float4(0.f, 0.f, 0.f, 0.f);
    }
  };
  auto store_a = [&](int buf) {
    for (int i = 0; i < kALoads; ++i) {
      const int idx = tid + kThreads * i, r = idx / (kTK / 4), c = (idx % (kTK / 4)) * 4;
      __nv_bfloat162* d = reinterpret_cast<__nv_bfloat162*>(&As[buf][r][c]);
      d[0] = __floats2bfloat162_rn(a_next[i].x, a_next[i].y);
      d[1] = __floats2bfloat162_rn(a_next[i].z, a_next[i].w);
    }
  };
  auto load_w = [&](int buf, int k0) {
    for (int i = 0; i < kWLoads; ++i) {
      const int idx = tid + kThreads * i, r = idx / (kTK / 8), c = (idx % (kTK / 8)) * 8, gn = n0 + r;
      const bool ok = gn < w_rows;
      cp_async16(&Ws[buf][r][c], ok ? W + static_cast<std::size_t>(gn) * K + k0 + c : W, ok);
    }
    cp_async_commit();
  };

  const int steps = K / kTK;
  load_w(0, 0);
  load_a(0);
  store_a(0);
  cp_async_wait_all();
  __syncthreads();
  for (int s = 0; s < steps; ++s) {
    const int cur = s & 1, nxt = cur ^ 1;
    const bool more = s + 1 < steps;
    if (more) {
      load_w(nxt, (s + 1) * kTK);
      load_a((s + 1) * kTK);
    }
    for (int kk = 0; kk < kTK; kk += 16) {
      unsigned a[MI][4], b[NI][2];
      for (int i = 0; i < MI; ++i) ldmatrix_x4(&As[cur][wm + 16 * i + lane % 16][kk + (lane / 16) * 8], a[i]);
      for (int j = 0; j < NI; j += 2) {
        unsigned r[4];
        ldmatrix_x4(&Ws[cur][wn + 8 * j + lane % 8 + (lane / 16) * 8][kk + ((lane / 8) % 2) * 8], r);
        b[j][0] = r[0];
        b[j][1] = r[1];
        b[j + 1][0] = r[2];
        b[j + 1][1] = r[3];
      }
      for (int i = 0; i < MI; ++i)
        for (int j = 0; j < NI; ++j) mma_bf16(acc[i][j], a[i], b[j][0], b[j][1]);
    }
    if (more) {
      store_a(nxt);
      cp_async_wait_all();
    }
    __syncthreads();
  }

  const int g = lane / 4, t = lane % 4;
  for (int i = 0; i < MI; ++i)
    for (int j = 0; j < NI; ++j)
      for (int h = 0; h < 2; ++h) {
        const int gm = m0 + wm + 16 * i + g + 8 * h;
        if (gm >= M) continue;
        for (int e = 0; e < 2; ++e) {
          const int gn = n0 + wn + 8 * j + 2 * t + e;
          if (gn < N) {
            const float v = acc[i][j][2 * h + e];
            C[static_cast<std::size_t>(gm) * ldc + gn] = bias ? v + bias[gn] : v;
          }
        }
      }
}

template <int MI, int NI>
void launch(const float* A, int M, int K, int lda, const __nv_bfloat16* W, int w_rows, int N, const float* bias,
            float* C, int ldc, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>((N + 32 * NI - 1) / (32 * NI)), static_cast<unsigned>((M + 32 * MI - 1) / (32 * MI)));
  gemm_bf16_mma_kernel<MI, NI><<<grid, kThreads, 0, s>>>(A, M, K, lda, W, w_rows, N, bias, C, ldc);
}

}  // namespace

bool gemm_mma_fits(const float* A, int K, int lda, const void* W) {
  return K % kTK == 0 && lda % 4 == 0 && reinterpret_cast<std::uintptr_t>(A) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(W) % 16 == 0;
}

void gemm_bf16_mma(const float* A, int M, int K, int lda, const void* W, int w_rows, int N, const float* bias, float* C,
                   int ldc, cudaStream_t s) {
  const auto* w = static_cast<const __nv_bfloat16*>(W);
  // The largest tile that still gives every SM a couple of blocks (H200: 132 SMs). Small passes
  // take narrower tiles instead of split-K, which would change the K order.
  constexpr long kEnough = 2 * 132;
  auto blocks = [&](int bm, int bn) { return long((M + bm - 1) / bm) * long((N + bn - 1) / bn); };
  if (blocks(128, 128) >= kEnough) launch<4, 4>(A, M, K, lda, w, w_rows, N, bias, C, ldc, s);
  else if (blocks(64, 128) >= kEnough) launch<2, 4>(A, M, K, lda, w, w_rows, N, bias, C, ldc, s);
  else launch<1, 2>(A, M, K, lda, w, w_rows, N, bias, C, ldc, s);
}

}  // namespace parity::cuda
