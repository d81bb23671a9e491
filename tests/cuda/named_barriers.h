#pragma once
// named_barriers.cu: the persistent decode step's block-level barriers alone (cuda_persistent_decode_test.cpp).
#include <cuda_runtime_api.h>

namespace parity::test {

// `blocks` blocks of 256 threads, `rounds` rounds each, as the persistent step's layer loop: threads
// 0-127 hand values on through shared memory under `bar.sync 1, 128` (the SSM step's ssu_sync), warps
// 0-6 meet at `bar.sync 2, 224` (others_sync: the producer's warp skips it), then the whole block sums
// (t + r) + that handoff's value by block_sum<256>, and thread 224 (the producer's lane) writes the sum to
// out[r · blocks + block]. Each sum is 40768 + 384 r, exact in fp32.
void skipped_named_barrier_sums(float* out, int rounds, int blocks, cudaStream_t s);

}  // namespace parity::test
