#include "backend_cuda/step_profile.h"

#include "kernels_cuda/cuda_check.h"

namespace parity::backend_cuda {

const char* step_part_name(StepPart p) {
  static const char* const names[kNumStepParts] = {"attn_proj",  "attn_core", "mamba_gemm", "mamba_conv", "mamba_ssd",
                                                   "mamba_norm", "moe",       "shared_mlp", "other"};
  return names[static_cast<int>(p)];
}

StepProfile::~StepProfile() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

cudaEvent_t StepProfile::event(std::size_t i) {
  while (events_.size() <= i) {
    cudaEvent_t e = nullptr;
    cuda::cuda_check(cudaEventCreate(&e), "cudaEventCreate");
    events_.push_back(e);
  }
  return events_[i];
}

void StepProfile::mark(StepPart p, cudaStream_t s) {
  cuda::cuda_check(cudaEventRecord(event(parts_.size()), s), "cudaEventRecord");
  parts_.push_back(p);
}

void StepProfile::finish(cudaStream_t s) {
  if (parts_.empty()) return;
  const cudaEvent_t end = event(parts_.size());
  cuda::cuda_check(cudaEventRecord(end, s), "cudaEventRecord");
  cuda::cuda_check(cudaEventSynchronize(end), "cudaEventSynchronize");
  for (std::size_t i = 0; i < parts_.size(); ++i) {
    float ms = 0.0f;
    cuda::cuda_check(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]), "cudaEventElapsedTime");
    seconds_[static_cast<std::size_t>(parts_[i])] += ms / 1000.0;
  }
  parts_.clear();
  ++passes_;
}

double StepProfile::total_seconds() const {
  double t = 0;
  for (double s : seconds_) t += s;
  return t;
}

void StepProfile::clear() {
  parts_.clear();
  seconds_.fill(0.0);
  passes_ = 0;
}

}  // namespace parity::backend_cuda
