#include "backend_cuda/cuda_lm_head.h"

#include <utility>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"
#include "model/weight_loading.h"

namespace parity::backend_cuda {

CudaLmHead::CudaLmHead(const model::Checkpoint& ck, LmHeadNames names, int hidden, int vocab, float eps,
                       std::optional<float> divisor, bool tied, bool fp32)
    : names_(std::move(names)), hidden_(hidden), vocab_(vocab), eps_(eps), divisor_(divisor), tied_(tied) {
  const int64_t H = hidden, V = vocab;
  if (!tied) upload_weight(fp32, model::widen(model::need_tensor(ck, names_.head_weight, {V, H})), vocab, own_);
  upload_f32(norm_, model::widen(model::need_tensor(ck, names_.norm_weight, {H})));
}

bool CudaLmHead::probed(const DeviceProbe& probe) const {
  return probe.wants(names_.norm_point) || probe.wants(names_.head_point);
}

void CudaLmHead::reserve(LmHeadScratch& sc, int T, int R, bool probed) const {
  const std::size_t rows = static_cast<std::size_t>(probed ? T : R);
  sc.hidden.resize(rows * hidden_);
  sc.logits.resize(rows * vocab_);
  if (probed) sc.picked.resize(static_cast<std::size_t>(R) * vocab_);
}

void CudaLmHead::enqueue(const DeviceWeight& embed, const float* x, int rows, LmHeadScratch& sc,
                         const DeviceProbe& probe, cudaStream_t st) const {
  const int H = hidden_, V = vocab_;
  const cuda::DeviceBuffer<float> no_bias;
  cuda::rmsnorm(x, rows, H, norm_.data(), eps_, sc.hidden.data(), st);
  probe(names_.norm_point, sc.hidden.data(), rows, H, H);
  gemm(sc.hidden.data(), rows, H, tied_ ? embed : own_, V, no_bias, sc.logits.data(), st);
  if (divisor_) cuda::divide_inplace(sc.logits.data(), *divisor_, static_cast<std::size_t>(rows) * V, st);
  probe(names_.head_point, sc.logits.data(), rows, V, V);
}

const float* CudaLmHead::enqueue_logit_rows(const DeviceWeight& embed, const float* resid, int T,
                                            const int32_t* logit_rows, int R, bool probed, LmHeadScratch& sc,
                                            const DeviceProbe& probe, const model::ForwardBatch& b,
                                            cudaStream_t st) const {
  if (probed) {
    // Every row through the head, then the logit rows picked from its logits.
    enqueue(embed, resid, T, sc, probe, st);
    if (R == 0) return sc.logits.data();
    cuda::gather_rows(sc.logits.data(), vocab_, logit_rows, R, vocab_, sc.picked.data(), st);
    return sc.picked.data();
  }
  if (R > 0) {
    cuda::gather_rows(resid, hidden_, logit_rows, R, hidden_, sc.hidden.data(), st);
    // Neither head point is wanted (probed): asking again would be one more question to the hooks,
    // which tensor-parallel ranks without logit rows (R = 0) would not ask with them.
    enqueue(embed, sc.hidden.data(), R, sc, DeviceProbe(nullptr, b, st), st);
  }
  return sc.logits.data();
}

void copy_logits_to_host(const float* dev, int R, int V, float* host, cudaStream_t st) {
  if (R > 0)
    cuda::cuda_check(cudaMemcpyAsync(host, dev, static_cast<std::size_t>(R) * V * 4, cudaMemcpyDeviceToHost, st),
                     "logits to host");
}

}  // namespace parity::backend_cuda
