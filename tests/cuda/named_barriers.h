#pragma once
// named_barriers.cu: the persistent decode step's block-level barriers alone (cuda_persistent_decode_test.cpp),
// and the patterns around them, to tell which one compute-sanitizer's racecheck reports.
#include <cuda_runtime_api.h>

namespace parity::test {

// Patterns (bits): threads 0-127 hand values on through shared memory under `bar.sync 1, 128` (the SSM
// step's ssu_sync); the same handoff with the whole block at `bar.sync 1, 256`; warps 0-6 meet at
// `bar.sync 2, 224` (others_sync: the producer's warp skips it). The persistent step is
// kHalfBlockHandoff | kSevenWarpBarrier.
inline constexpr int kHalfBlockHandoff = 1, kSevenWarpBarrier = 2, kWholeBlockHandoff = 4;

// `blocks` blocks of 256 threads, `rounds` rounds each, as the persistent step's layer loop: the pattern's
// barriers, then __syncthreads and the whole block sums (t + r), plus the handoff's value where there is
// one, by block_sum<256>; thread 224 (the producer's lane) writes the sum to out[r · blocks + block].
// Each sum is 32640 + 256 r without a handoff, 40768 + 384 r with one, exact in fp32.
void named_barrier_sums(float* out, int rounds, int blocks, int pattern, cudaStream_t s);

}  // namespace parity::test
