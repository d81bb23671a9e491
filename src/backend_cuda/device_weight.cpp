#include "backend_cuda/device_weight.h"

#include "common/dtype.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"

namespace parity::backend_cuda {

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}

void upload_weight(bool fp32, const std::vector<float>& w, int rows, DeviceWeight& out) {
  out.rows = rows;
  out.fp32 = fp32;
  if (fp32) {
    out.f32.upload(w);
    return;
  }
  std::vector<uint16_t> b = to_bf16(w);
  b.resize(static_cast<std::size_t>(cuda::padded_rows(rows)) * (w.size() / static_cast<std::size_t>(rows)), 0);
  out.bf16.upload(b);
}

void upload_f32(cuda::DeviceBuffer<float>& d, const std::vector<float>& v) {
  if (!v.empty()) d.upload(v);
}

void gemm(const float* A, int M, int K, const DeviceWeight& w, int N, const cuda::DeviceBuffer<float>& bias, float* C,
          cudaStream_t s) {
  const float* bp = bias.size() ? bias.data() : nullptr;
  if (w.fp32) cuda::gemm(A, M, K, K, w.f32.data(), cuda::WeightType::F32, N, bp, C, N, s);
  else cuda::gemm(A, M, K, K, w.bf16.data(), cuda::WeightType::BF16, N, bp, C, N, s, cuda::padded_rows(w.rows));
}

void gemm(const float* A, const uint16_t* a16, int M, int K, const DeviceWeight& w, int N,
          const cuda::DeviceBuffer<float>& bias, float* C, cudaStream_t s) {
  if (w.fp32 || a16 == nullptr) return gemm(A, M, K, w, N, bias, C, s);
  cuda::gemm_rounded(A, a16, M, K, K, w.bf16.data(), cuda::WeightType::BF16, N, bias.size() ? bias.data() : nullptr, C,
                     N, s, cuda::padded_rows(w.rows));
}

bool gemm_reads_copy_only(const float* A, const uint16_t* a16, int M, int K, const DeviceWeight& w, int N) {
  return !w.fp32 && cuda::gemm_rounded_reads_copy_only(A, a16, M, K, K, w.bf16.data(), cuda::WeightType::BF16, N);
}

void wait_for_uploads() { cuda::cuda_check(cudaDeviceSynchronize(), "weights to the device"); }

void embed_rows(const DeviceWeight& table, const int32_t* tokens, int T, int cols, float* out, cudaStream_t s) {
  if (table.fp32) cuda::gather_rows(table.f32.data(), cols, tokens, T, cols, out, s);
  else cuda::embed_bf16(table.bf16.data(), tokens, T, cols, out, s);
}

}  // namespace parity::backend_cuda
