#pragma once
// A GEMM weight on the device as the CUDA models compute with it, and the few calls every model makes
// with one: upload, multiply, look rows up by token. One place, so that the bf16/fp32 choice and the
// bf16 rows' padding (which the GEMM's tiles rely on) cannot drift between the models.
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels_cuda/device_buffer.h"

namespace parity::backend_cuda {

// [rows][k]: bf16 for the tensor cores (DESIGN.md rule 5), with zero rows up to a whole 16-row strip
// (gemm's w_rows: its tiles may read them), or fp32 for `--dtype float32`.
struct DeviceWeight {
  cuda::DeviceBuffer<uint16_t> bf16;
  cuda::DeviceBuffer<float> f32;
  int rows = 0;
  bool fp32 = false;
};

std::vector<uint16_t> to_bf16(const std::vector<float>& v);
// w [rows][k] into out, in the form `fp32` asks for.
void upload_weight(bool fp32, const std::vector<float>& w, int rows, DeviceWeight& out);
// A vector of fp32 parameters (norm weights, biases, A, D); nothing for an empty one (an absent bias
// stays an empty buffer, which gemm reads as "no bias").
void upload_f32(cuda::DeviceBuffer<float>& d, const std::vector<float>& v);

// C[M][N] = A[M][K] · wᵀ (+ bias when it is not empty), in w's precision.
void gemm(const float* A, int M, int K, const DeviceWeight& w, int N, const cuda::DeviceBuffer<float>& bias, float* C,
          cudaStream_t s);
// The same with A's bf16 copy a16 [M][K] beside it (a fused norm's; null: none), which bf16 weights'
// GEMM then reads instead of rounding A itself (cuda::gemm_rounded: the same bits).
void gemm(const float* A, const uint16_t* a16, int M, int K, const DeviceWeight& w, int N,
          const cuda::DeviceBuffer<float>& bias, float* C, cudaStream_t s);
// Whether that GEMM reads only a16, never A's fp32 values (cuda::gemm_rounded_reads_copy_only): the norm
// that writes both may then skip A.
bool gemm_reads_copy_only(const float* A, const uint16_t* a16, int M, int K, const DeviceWeight& w, int N);
// Waits until every upload to the current device has landed. DeviceBuffer::upload's cudaMemcpy from pageable
// memory may return before its copy does, and the models run on non-blocking streams, which are not ordered
// after it: a model calls this once at the end of its load, so that its first pass reads whole weights.
void wait_for_uploads();
// out[t] = table[tokens[t]] ([T][cols], fp32): the embedding lookup, in the table's precision.
void embed_rows(const DeviceWeight& table, const int32_t* tokens, int T, int cols, float* out, cudaStream_t s);

}  // namespace parity::backend_cuda
