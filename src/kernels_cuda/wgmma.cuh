#pragma once
// Hopper's warpgroup tensor-core instructions (sm_90a), shared by the wgmma GEMM kernels: the
// shared-memory matrix descriptor for K-major tiles in the 128-byte swizzle (the layout the TMA
// unit writes through tensor_map.h's bf16_rows_tensor_map), the fences and group waits, and
// wgmma m64nNk16 f32 += bf16 · bf16 with both operands read from shared memory (N = 8…256 and 160),
// every operand list spelled out by one set of macros.
//
// Bits (DESIGN.md rule 3): CudaWgmmaBits (tests/cuda/cuda_wgmma_bits_test.cpp) shows on the
// device that a chain of these k16 steps on one fp32 accumulator gives exactly the bits of the
// mma.sync m16n8k16 chain the other GEMM kernels issue, the operands' roles swapped included. The
// accumulate step is always D = A·B + D (scale-d = 1) on accumulators the caller zeroes in
// registers first: mma.sync's chain starts from c = +0 and adds it, so a first step whose
// products sum to -0 gives -0 + +0 = +0 there. wgmma's scale-d = 0 form (D = A·B, no addend)
// would keep the -0: the same value but other bits.
//
// Compiled only for sm_90a (the "a" features: __CUDA_ARCH_FEAT_SM90_ALL); elsewhere the bodies
// are empty so that a generic compile of the same translation unit still builds.
#include <cstdint>

namespace parity::cuda::wgmma {

// A shared-memory matrix descriptor (PTX ISA, "Matrix Descriptor Format" for wgmma):
//   bits  0-13  start address >> 4
//   bits 16-29  leading dimension byte offset >> 4 (unused by K-major swizzled layouts whose k16
//               step lies inside one 128-byte row; set to 1 as the PTX guide's examples do)
//   bits 32-45  stride dimension byte offset >> 4: from one 8-row group to the next
//   bits 49-51  base offset (0: every 8-row group starts on a 1024-byte boundary)
//   bits 62-63  swizzle: 1 = 128-byte
// The tile: rows of 64 bf16 (128 bytes) of K, row r's 16-byte chunk c stored at chunk c ^ (r % 8),
// 8-row groups 1024 bytes apart, the first on a 1024-byte boundary. The k16 step kk (0..3) of the
// 64-deep box starts 32·kk bytes into row 0: the hardware applies the XOR to the address bits the
// way the TMA unit did, so advancing the start address by 32 bytes is how a step moves along K.
__device__ __forceinline__ std::uint64_t desc_k_sw128(unsigned smem_addr) {
  return std::uint64_t((smem_addr >> 4) & 0x3FFFu) | (std::uint64_t(1) << 16) | (std::uint64_t(1024 >> 4) << 32) |
         (std::uint64_t(1) << 62);
}

// Before the first wgmma of a batch (and after registers it reads were written): orders the
// warpgroup's register and shared-memory accesses before the async tensor-core reads.
__device__ __forceinline__ void fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// Closes the wgmma issued since the last commit into one group.
__device__ __forceinline__ void commit_group() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Returns once at most N groups are pending: the accumulators of the others are final and their
// shared-memory operands no longer read.
template <int N>
__device__ __forceinline__ void wait_group() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Keeps the compiler from moving reads or writes of accumulator registers across a wgmma fence or
// wait: wgmma writes them asynchronously, outside what the compiler sees.
template <int R>
__device__ __forceinline__ void fence_operands(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

// ---- wgmma m64nNk16, f32 accumulators, bf16 A and B from descriptors (both K-major) ----------
// The accumulator fragment: warp w of the warpgroup holds rows 16w..16w+15 of the 64×N tile; lane
// (g = lane / 4, q = lane % 4) holds, for each 8-column block j, d[4j], d[4j+1] = row g, columns
// 8j + 2q, 8j + 2q + 1 and d[4j+2], d[4j+3] = row g + 8, the same columns.
//
// Operand lists: the N/2 accumulators come first ("+f", numbered %0..%(N/2-1)), then the two
// descriptors and the scale-d register. The macros below spell them out.
#define PARITY_WG_F4(i) "+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3])
#define PARITY_WG_F8(i) PARITY_WG_F4(i), PARITY_WG_F4((i) + 4)
#define PARITY_WG_F16(i) PARITY_WG_F8(i), PARITY_WG_F8((i) + 8)
#define PARITY_WG_F32(i) PARITY_WG_F16(i), PARITY_WG_F16((i) + 16)
#define PARITY_WG_F64(i) PARITY_WG_F32(i), PARITY_WG_F32((i) + 32)
#define PARITY_WG_F128(i) PARITY_WG_F64(i), PARITY_WG_F64((i) + 64)
#define PARITY_WG_F80(i) PARITY_WG_F64(i), PARITY_WG_F16((i) + 64)

#define PARITY_WG_R4 "%0, %1, %2, %3"
#define PARITY_WG_R8 PARITY_WG_R4 ", %4, %5, %6, %7"
#define PARITY_WG_R16 PARITY_WG_R8 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define PARITY_WG_R32                                                                                          \
  PARITY_WG_R16 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define PARITY_WG_R64                                                                                          \
  PARITY_WG_R32 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, " \
                "%50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define PARITY_WG_R80 PARITY_WG_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79"
#define PARITY_WG_R128                                                                                         \
  PARITY_WG_R64 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, " \
                "%82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "    \
                "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, "    \
                "%115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"

// REGS: the accumulator list; A, B, S: the operand numbers of the descriptors and of scale-d.
// scale-d is a predicate: set from a register holding 1 (always accumulate, see the file comment);
// imm-scale-a/b = 1 (no negation), imm-trans-a/b = 0 (both K-major).
#define PARITY_WG_ASM(NN, REGS, A, B, S, ...)                                                         \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" S ", 0;\n"                                            \
               "wgmma.mma_async.sync.aligned.m64n" #NN "k16.f32.bf16.bf16 {" REGS "}, %" A ", %" B ", p, 1, 1, " \
               "0, 0;\n}\n"                                                                               \
               : __VA_ARGS__                                                                              \
               : "l"(da), "l"(db), "r"(1))

// d (N/2 floats per thread) += A (64×16, descriptor da) · B (N×16 K-major, descriptor db)ᵀ.
template <int N>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], std::uint64_t da, std::uint64_t db) {
  static_assert(N == 8 || N == 16 || N == 32 || N == 64 || N == 128 || N == 256,
                "the N this header spells out");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (N == 8) PARITY_WG_ASM(8, PARITY_WG_R4, "4", "5", "6", PARITY_WG_F4(0));
  else if constexpr (N == 16) PARITY_WG_ASM(16, PARITY_WG_R8, "8", "9", "10", PARITY_WG_F8(0));
  else if constexpr (N == 32) PARITY_WG_ASM(32, PARITY_WG_R16, "16", "17", "18", PARITY_WG_F16(0));
  else if constexpr (N == 64) PARITY_WG_ASM(64, PARITY_WG_R32, "32", "33", "34", PARITY_WG_F32(0));
  else if constexpr (N == 128) PARITY_WG_ASM(128, PARITY_WG_R64, "64", "65", "66", PARITY_WG_F64(0));
  else PARITY_WG_ASM(256, PARITY_WG_R128, "128", "129", "130", PARITY_WG_F128(0));
#else
  (void)d;
  (void)da;
  (void)db;
#endif
}

// N = 160 (a tile whose column count divides out_proj's 2560 more evenly: gemm_wgmma.cu).
template <int N>
__device__ __forceinline__ void mma_ss_wide(float (&d)[N / 2], std::uint64_t da, std::uint64_t db) {
  static_assert(N == 160, "the N this header spells out");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  PARITY_WG_ASM(160, PARITY_WG_R80, "80", "81", "82", PARITY_WG_F80(0));
#else
  (void)d;
  (void)da;
  (void)db;
#endif
}

#undef PARITY_WG_R80
#undef PARITY_WG_F80
#undef PARITY_WG_ASM
#undef PARITY_WG_R128
#undef PARITY_WG_R64
#undef PARITY_WG_R32
#undef PARITY_WG_R16
#undef PARITY_WG_R8
#undef PARITY_WG_R4
#undef PARITY_WG_F128
#undef PARITY_WG_F64
#undef PARITY_WG_F32
#undef PARITY_WG_F16
#undef PARITY_WG_F8
#undef PARITY_WG_F4

}  // namespace parity::cuda::wgmma
