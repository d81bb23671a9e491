#pragma once
// What a batch-1 decode step's launch structure costs with nothing to compute (issue 11's decode target:
// within 1.3x of the weights' read time): each GEMM replaced by a kernel that only reads its weight
// bytes, each small kernel (norm, conv, SSM step, gated norm) by one that only waits for the kernel
// before it and lets the next one start, launched programmatically in a step's order, as the model's
// graph launches them. Such a step takes the weights' read time plus every launch boundary and every
// weight read's ramp and tail: the least the launch structure allows, whatever the kernels compute.
// Benchmarks only (BM_CudaStreamFloor).
#include <cstddef>

#include <cuda_runtime_api.h>

namespace parity::cuda {

// Reads bytes [0, bytes) of p (16-byte aligned, a multiple of 16) with every SM, launched
// programmatically after the kernel before it. early: as the decode GEMMs request their weights, the
// reads do not wait for that kernel (the kernel waits for it only before it ends, so it still completes
// after it), and the next kernel is released at once; else it waits first, then releases and reads.
// sink: written only if a thread's bytes hash to one value (so the reads stay); nobody reads it.
void stream_read(const void* p, std::size_t bytes, bool early, unsigned* sink, cudaStream_t s);
// One warp that waits for the kernel before it and releases the next: a launch boundary with nothing in it.
void empty_step(cudaStream_t s);

}  // namespace parity::cuda
