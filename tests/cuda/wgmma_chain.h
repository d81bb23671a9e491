#pragma once
// wgmma_chain.cu: D[64][8] = A[64][K] · Btᵀ (bf16 bit patterns, Bt is [8][K]) as one fp32 chain of
// 16-deep tensor-core steps, by mma.sync, by wgmma, and by mma.sync with the steps in reverse order.
#include <cstdint>
#include <vector>

namespace parity::test {

struct ChainResults {
  std::vector<float> mma, wgmma, mma_reversed;
};
ChainResults run_chains(const std::vector<uint16_t>& A, const std::vector<uint16_t>& Bt, int K);

// The operands' roles swapped: D[16][64] = X[16][K] · W[64][K]ᵀ (K a multiple of 64) by mma.sync
// with X as its m16 'A' side and W as its n8 'B' tiles, and by wgmma m64n16k16 with W as its A
// operand and X as its B operand (both from 128-byte-swizzled shared memory through descriptors),
// computing Dᵀ and stored back as D; and that wgmma chain with its k16 steps in descending k.
struct SwappedChains {
  std::vector<float> mma, wgmma, wgmma_reversed;
};
SwappedChains run_swapped_chains(const std::vector<uint16_t>& X, const std::vector<uint16_t>& W, int K);

}  // namespace parity::test
