#pragma once
// The C store the mma.sync and wgmma tile kernels share (gemm_mma.cu, gemm_wgmma.cu): both hold a
// row's columns gn and gn + 1 in one thread, so the bias is added once to each (its one rounding
// after the K chain, the contract in gemm.cu) and the pair goes out as one 8-byte store when the
// caller's C allows it (ldc even, C 8-byte aligned: pair_store), else as two masked 4-byte stores.
namespace parity::cuda {

__device__ __forceinline__ void store_column_pair(float* crow, int gn, int N, float v0, float v1, const float* bias,
                                                  bool pair_store) {
  if (bias) {
    if (gn < N) v0 = v0 + bias[gn];
    if (gn + 1 < N) v1 = v1 + bias[gn + 1];
  }
  if (pair_store && gn + 1 < N) {
    *reinterpret_cast<float2*>(crow + gn) = make_float2(v0, v1);
  } else {
    if (gn < N) crow[gn] = v0;
    if (gn + 1 < N) crow[gn + 1] = v1;
  }
}

}  // namespace parity::cuda
