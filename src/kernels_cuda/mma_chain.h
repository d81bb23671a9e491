#pragma once
// The floor a decode GEMM cannot go under without split-K (issue 11, DESIGN.md rule 3): every output
// is one fp32 accumulator over K in 16-deep tensor-core steps ascending, so a one-row pass takes at
// least K/16 dependent steps after its input has arrived (out_proj, K = 5120: 320). This measures a
// dependent step on the device, with nothing else in the way: one chain of `steps` steps on one
// accumulator per warp (mma.sync) or warpgroup (wgmma).
// Benchmarks only (BM_CudaMmaChain).
#include <cuda_runtime_api.h>

namespace parity::cuda {

enum class MmaChainWay : int {
  MmaRegisters = 0,  // mma.sync m16n8k16, operands fixed in registers: the step's own latency
  MmaLdmatrix = 1,   // mma.sync, each 64-deep box's fragments read by ldmatrix a box ahead (the decode kernels' loop, no ring)
  WgmmaGroups = 2,   // wgmma m64n8k16 from shared memory, four steps a commit group, one group in flight (swap-AB's wgmma loop)
  WgmmaOneGroup = 3, // wgmma m64n8k16, every step issued before one wait
};
inline constexpr int kMmaChainWays = 4;
const char* mma_chain_way_name(int way);

struct MmaChainResult {
  double cycles_per_step = 0;  // SM clock cycles from the first issue to the last result, over steps; mean over blocks
  double ms = 0;               // the launch's device time (events)
};
// out_proj's K = 5120 in 16-deep steps.
inline constexpr int kMmaChainSteps = 320;
// One launch of `blocks` blocks, a chain of kMmaChainSteps steps each of `warps` warps (the mma.sync
// ways, 1..8) or warpgroups (the wgmma ways, 1..2) a block.
MmaChainResult mma_chain(int way, int warps, int blocks);

}  // namespace parity::cuda
