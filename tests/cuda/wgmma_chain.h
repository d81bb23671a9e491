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

}  // namespace parity::test
