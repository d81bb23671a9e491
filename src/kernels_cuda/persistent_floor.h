#pragma once
// What a batch-1 decode step could cost as one persistent kernel (issue 11's decode target: within
// 1.3x of the weights' read time). stream_floor.h measured the launch structure the model uses today:
// with every kernel empty but the weight reads it already takes 1.21x the floor, because each launch
// boundary costs ~0.6 us and stops the next weight read from starting, and the small kernels' latency
// (the SSM step, the norms) then adds to it with the memory idle. Here the step is one cooperative
// kernel, one block an SM, that walks the layers itself: grid-wide barriers where a layer's data
// dependences need them (after in_proj and the conv, after the SSM step, after out_proj), the small
// kernels' latency as spins of measured length, and optionally the two overlaps a persistent kernel
// makes possible: out_proj's weights copied into shared memory (26 MB: 198 KB an SM) while in_proj
// ends and the small work runs, and the next in_proj's first bytes asked of L2 while out_proj's
// dependent tensor-core chain runs. Nothing is computed; the result says what a persistent design would
// have to beat, not what one would reach. Benchmarks only (BM_CudaPersistentFloor).
#include <cstddef>

#include <cuda_runtime_api.h>

namespace parity::cuda {

struct PersistentFloorStep {
  std::size_t in_bytes = 0, out_bytes = 0, head_bytes = 0;  // each layer's in_proj and out_proj, then lm_head
  int layers = 0;
  // Latency a layer spends on each piece of small work, on the critical path (0: none).
  float ssm_us = 0, gated_norm_us = 0, out_chain_us = 0, norm_us = 0;
  bool out_in_smem = false;  // out_proj's weights into shared memory ahead of its phase
  std::size_t next_l2_bytes = 0;  // of the next in_proj, asked of L2 during out_proj's phase (all blocks)
};

// Runs one step over `weights` (layers * (in_bytes + out_bytes) + head_bytes, 16-byte aligned, sizes
// multiples of 16 * the SM count); `barrier` is one device unsigned, zeroed here before the launch.
// Returns false (and runs nothing) when the device cannot hold one such block on every SM at once.
bool persistent_floor_step(const void* weights, const PersistentFloorStep& step, unsigned* barrier,
                           unsigned* sink, cudaStream_t s);

}  // namespace parity::cuda
