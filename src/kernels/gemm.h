#pragma once
// Batch-invariant GEMM: C[M,N] = A[M,K] · W[N,K]^T (+ bias). W is a weight in Hugging Face
// layout (out_features × in_features), packed once at load.
//
// Contract (DESIGN.md rule 3): every output element is ONE sequential FMA chain over k = 0..K-1
// starting from 0.0f, then `+ bias[n]` (one add) if a bias is given. That order does not depend
// on M, the tile sizes, the thread count or the ISA, so row m of C has the same bits whether it
// is computed alone or inside a batch of 4096, by the AVX-512, AVX2 or portable path.
#include <cstdint>
#include <memory>

#include "common/aligned.h"
#include "common/dtype.h"

namespace parity::kernels {

// Panels of kNr output columns × all of K, stored k-major inside a panel so the micro-kernel
// reads kNr consecutive weights per k. Weights keep their storage dtype (bf16/fp16/fp32) and
// are widened exactly inside the micro-kernel, so M=1 reads half the bytes for bf16.
struct PackedWeight {
  static constexpr int kNr = 32;  // output columns per panel (2 × zmm)
  int n = 0, k = 0;
  DType dtype = DType::F32;  // F32, BF16 or F16
  AlignedBuffer<uint8_t> data;  // ceil(n/kNr) panels × k × kNr elements, zero padded
};

// `w` points at n×k elements of `dtype`, row-major (HF layout).
PackedWeight pack_weight(const void* w, DType dtype, int n, int k);

// A is M×K with row stride lda, C is M×N with row stride ldc. bias may be null.
// Parallel over (row-block, panel) tiles with the global thread count.
void gemm(const float* a, int m, int lda, const PackedWeight& w, const float* bias, float* c, int ldc);

// The plain scalar twin: std::fma loop in the contract's order, no packing tricks. Tests
// compare gemm() against it bit for bit.
void gemm_reference(const float* a, int m, int lda, const void* w, DType dtype, int n, int k,
                    const float* bias, float* c, int ldc);

}  // namespace parity::kernels
