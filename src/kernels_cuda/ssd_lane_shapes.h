#pragma once
// The pipelined lane walk with more columns a lane (ssd_pipe4_body.cuh): one namespace per shape, each
// with the same entry points. pipe4 (ssd_pipe4.cu): four columns a lane, 64 columns of one head a block,
// two warps; way 764 (C and B by quarter, as 664) and 864 (C and B as in the row). pipe4w (ssd_pipe4w.cu):
// four columns a lane, one warp, 32 columns; 832 (as in the row). pipe2 (ssd_pipe2.cu): two columns a
// lane, one warp, 16 columns; 716 / 816. pipe1 (ssd_pipe1.cu): one column a lane, two warps, 16 columns;
// 616 / 916. way(w): whether w is one of the shape's ways; probe: as pipe_probe (ssd_device.cuh), with
// the steps wait, next copies issued, next cell's coefficients, quarter sums and outputs, delta and fold,
// and the cell count; resident: blocks an SM.
#include "kernels_cuda/ops.h"

namespace parity::cuda::ssd {
namespace pipe4 {
bool way(int w);
void probe(long long* device_buffer);
int resident(int w);
void launch(int w, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* y, cudaStream_t s);
}  // namespace pipe4
namespace pipe4w {
bool way(int w);
void probe(long long* device_buffer);
int resident(int w);
void launch(int w, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* y, cudaStream_t s);
}  // namespace pipe4w
namespace pipe2 {
bool way(int w);
void probe(long long* device_buffer);
int resident(int w);
void launch(int w, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* y, cudaStream_t s);
}  // namespace pipe2
namespace pipe1 {
bool way(int w);
void probe(long long* device_buffer);
int resident(int w);
void launch(int w, const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
            const float* A, const float* D, const SsdState& st, const float* band, float* y, cudaStream_t s);
}  // namespace pipe1
}  // namespace parity::cuda::ssd
