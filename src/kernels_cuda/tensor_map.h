#pragma once
// Tensor maps for the TMA unit's tensor copies (cp.async.bulk.tensor): the descriptor a kernel takes
// as a __grid_constant__ parameter to copy whole 2D boxes of a matrix into shared memory in one
// instruction. Encoded on the host through the driver's cuTensorMapEncodeTiled, reached through the
// runtime's entry-point query so that nothing links against the driver library.
#include <cstdint>

#include <cuda.h>

namespace parity::cuda {

// bf16 weights as `groups` matrices of [rows][K] (row-major, K contiguous), matrix z at
// W + z·group_stride elements; a box is 64 elements of K (128 bytes, the 128-byte swizzle: the
// 16-byte chunk c of a box row r lands at chunk c ^ (r % 8)) by `box_rows` rows of one matrix.
// Elements past K or past `rows` land as zeros. Requires K % 8 == 0, group_stride % 8 == 0, W
// 16-byte aligned and box_rows in [1, 256]; throws parity::Error otherwise or when the driver refuses.
CUtensorMap bf16_rows_tensor_map(const void* W, int K, int rows, int groups, std::int64_t group_stride, int box_rows);

// The same map for one matrix (groups = 1), encoded once per (W, K, rows, box_rows) and then taken
// from a small cache (the last 64 asked for): a map describes addresses and shapes only, never the
// contents, so the same key always means the same map. Saves the encoder's host time on every
// launch of a GEMM whose operands stay put (the weights, the activations' bf16 scratch).
CUtensorMap bf16_rows_tensor_map_cached(const void* W, int K, int rows, int box_rows);

// An fp32 output C [rows][N] with row stride ldc (elements) for the TMA unit's tensor stores
// (gemm_wgmma.cu's staged epilogue): a box is 32 columns (128 bytes, the 128-byte swizzle as above)
// by 64 rows; elements of a box past `rows` are not written, nor those past N when N is a multiple of
// 4 (the H200 wrote the rest of a row's last 16 bytes, columns N..N+3, as zeros: session 11's
// CudaGemmWgmmaWay padding test). Cached as bf16_rows_tensor_map_cached is (a map holds addresses
// and shapes only). Needs what f32_store_tensor_map_fits says (N % 4 == 0 and ldc % 4 == 0: the row
// and its stride whole 16-byte pieces; C 16-byte aligned; ldc >= N); throws parity::Error otherwise or
// when the driver refuses.
bool f32_store_tensor_map_fits(const float* C, int N, int ldc);
CUtensorMap f32_store_tensor_map_cached(float* C, int N, int rows, int ldc);

}  // namespace parity::cuda
