#pragma once
// Private to the GEMM files: the packed layout shared by every instruction set, and the per-ISA
// tile entry points the dispatcher in gemm.cpp calls.
#include <cstddef>

#include "kernels/gemm.h"

namespace parity::kernels::detail {

constexpr int kNr = PackedWeight::kNr;

// Where column j (0..31) of a panel sits inside one k-row of that panel.
// F32/F16: in order. BF16: interleaved as (c0, c16, c1, c17, ..., c15, c31), so that one 32-bit
// word holds columns i and 16+i: a left shift by 16 widens column i and a mask of the high half
// widens column 16+i, both exact and in place. The same layout serves 16- and 8-lane vectors
// (an 8-word load yields columns i..i+7 and 16+i..16+i+7).
//
// Helpers here are static: this header is also compiled with AVX flags, and an out-of-line copy
// with external linkage could be picked by the linker for baseline code.
static inline int packed_pos(DType dt, int j) {
  if (dt != DType::BF16) return j;
  return j < 16 ? 2 * j : 2 * (j - 16) + 1;
}

// C[m0..m1) × columns of panels [p0, p1) (the last panel may be partial: w.n bounds the store).
// Every element is the contract's chain: fma over k = 0..K-1 from 0.0f, then + bias.
void gemm_tile_portable(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                        int m0, int m1, int p0, int p1);
void gemm_tile_avx2(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                    int m0, int m1, int p0, int p1);
void gemm_tile_avx512(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                      int m0, int m1, int p0, int p1);
// The AVX-512 tile for many rows (gemm_wide_avx512.cpp): same chains, another loop order;
// gemm_tile_avx512 hands it tiles of at least kWideRows rows.
void gemm_tile_wide_avx512(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                           int m0, int m1, int p0, int p1);
constexpr int kWideRows = 48;
// All of C (m >= kWideRows rows) on nt threads that take (row chunk, run of panels) units as they
// come free, about units_per_thread of them a thread and chunk: the same chains as a static split.
void gemm_wide_avx512_dynamic(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                              int m, int nt, int units_per_thread);

}  // namespace parity::kernels::detail
