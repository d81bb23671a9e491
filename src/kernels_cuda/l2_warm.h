#pragma once
// out_proj's weights asked of L2 from a side branch of the step (issue 11, batch-1 decode). Between
// in_proj's end and out_proj's start a layer runs only small, latency-bound kernels (the conv, the SSM
// step, the gated norm), and DRAM is nearly idle for ~7 µs: about out_proj's 26 MB at the copy rate.
// Four earlier ways of asking L2 for those weights issued the requests from a kernel on the step's
// path (in_proj's tail, the conv's extra blocks, ...) and lost. Here a kernel on its own branch of the
// graph, after in_proj and beside the conv, issues them; out_proj waits for that kernel (which ends
// as soon as its requests are issued) as well as for the gated norm. A hint: nothing is written.
#include <cstddef>

#include <cuda_runtime_api.h>

namespace parity::cuda {

// A row-major weight: rows × row_bytes, 16-byte aligned rows (a multiple of 16 bytes each).
struct L2WarmRows {
  const void* base = nullptr;
  int rows = 0;
  std::size_t row_bytes = 0;
};

// A decode pass's SSM states (mode 3): slot[0..seqs) (device memory) index state [slots][bytes_a_slot].
struct L2WarmStates {
  const void* base = nullptr;
  std::size_t bytes_a_slot = 0;  // a multiple of 16
  const int* slot = nullptr;
  int seqs = 0;
};

// How the side kernel asks (0: not at all, the default):
//   1: every row's first `piece` bytes, then every row's second, …: the order a swap-AB GEMM's blocks
//      consume their rows' K boxes;
//   2: the whole range front to back in 32 KiB pieces (block by block: with_l2_prefetch's order);
//   3: the pass's SSM states first (32 KiB pieces), then as 1.
// delay_ns: the kernel sleeps that long before asking (so that the SSM step's own reads go first).
// Creates the side stream and events of the current device: call outside a capture.
void set_l2_warm(int mode, unsigned delay_ns = 0, unsigned piece = 1024);
int l2_warm_mode();
// The mode, delay and piece in one word (graph keys: a graph records how it was captured).
unsigned l2_warm_key();

// Forks a branch off s: after what s holds so far, a kernel asks L2 for w (and, mode 3, the states).
// Returns whether it forked (not when off, or when w or the states are not 16-byte aligned, as the
// bulk prefetch needs); then join_l2_warm(s) must follow before a capture ends: what s queues after it
// waits for that kernel.
bool warm_l2_beside(const L2WarmRows& w, const L2WarmStates& states, cudaStream_t s);
void join_l2_warm(cudaStream_t s);

}  // namespace parity::cuda
