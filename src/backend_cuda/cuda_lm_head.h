#pragma once
// The end of a CUDA language model, the same in both models but for names and Granite's divisor:
// final RMSNorm → lm_head (the token embedding itself when tied) → logits / divisor, with the two
// probe points; and an eager pass's way from the last hidden rows to the logit rows the engine asked
// for. One copy, so that a fix to the head (or to the probe-all-rows rule below) lands in both models.
#include <optional>
#include <string>

#include <cuda_runtime_api.h>

#include "backend_cuda/device_probe.h"
#include "backend_cuda/device_weight.h"
#include "kernels_cuda/device_buffer.h"
#include "model/checkpoint.h"
#include "model/forward_batch.h"

namespace parity::backend_cuda {

// The head's activations for a pass (they only grow).
struct LmHeadScratch {
  cuda::DeviceBuffer<float> hidden;  // the rows going through the head, normed in place
  cuda::DeviceBuffer<float> logits;  // their logits
  cuda::DeviceBuffer<float> picked;  // a probed pass's logit rows, gathered from every row's logits
};

// Where a model keeps its head, as Hugging Face names it.
struct LmHeadNames {
  std::string norm_weight;  // "backbone.norm_f.weight", "model.norm.weight"
  std::string norm_point;   // "backbone.norm_f", "model.norm"
  std::string head_weight = "lm_head.weight";
  std::string head_point = "lm_head";
};

class CudaLmHead {
 public:
  CudaLmHead() = default;
  // tied: lm_head is the embedding (enqueue's `embed`) and ck holds no head_weight. divisor: the logits
  // are divided by it (Granite's logits_scaling: a divisor in HF, not a multiplier by its inverse);
  // none: no division at all (Mamba2). Throws parity::Error naming a missing or misshapen tensor.
  CudaLmHead(const model::Checkpoint& ck, LmHeadNames names, int hidden, int vocab, float eps,
             std::optional<float> divisor, bool tied, bool fp32);

  // Whether the hooks want either head point: the pass then takes every row through the head, so that
  // the points see all T rows (the head is row-wise, the GEMM M-invariant: the same bits per row).
  bool probed(const DeviceProbe& probe) const;
  // The buffers of a pass of T rows, R of them logit rows. Called before the pass's first launch: no
  // buffer moves mid-pass.
  void reserve(LmHeadScratch& sc, int T, int R, bool probed) const;
  // norm, lm_head and the divisor over `rows` rows of x [rows][hidden] (may be sc.hidden): sc.hidden,
  // then sc.logits.
  void enqueue(const DeviceWeight& embed, const float* x, int rows, LmHeadScratch& sc, const DeviceProbe& probe,
               cudaStream_t st) const;
  // An eager pass's end: the R logit rows of resid [T][hidden] (their packed rows at logit_rows, on the
  // device) through the head, all T rows when `probed`. Returns where their logits [R][V] are.
  const float* enqueue_logit_rows(const DeviceWeight& embed, const float* resid, int T, const int32_t* logit_rows,
                                  int R, bool probed, LmHeadScratch& sc, const DeviceProbe& probe,
                                  const model::ForwardBatch& b, cudaStream_t st) const;

 private:
  LmHeadNames names_;
  int hidden_ = 0, vocab_ = 0;
  float eps_ = 0;
  std::optional<float> divisor_;
  bool tied_ = true;
  DeviceWeight own_;  // lm_head when not tied
  cuda::DeviceBuffer<float> norm_;
};

// dev [R][V] → host, queued on st (the caller then waits for the stream).
void copy_logits_to_host(const float* dev, int R, int V, float* host, cudaStream_t st);

}  // namespace parity::backend_cuda
