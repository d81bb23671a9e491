#pragma once
// Where a forward pass's GPU time goes, by kind of work (issue 14: attention, MoE, Mamba mixer and
// the rest), timed with CUDA events between the blocks of a pass. Off unless asked: a model holds a
// null StepProfile* and each mark is one branch. With a profile attached (set_step_profile, for
// benchmarks), the model runs every pass eagerly (an event inside a CUDA graph would time the
// graph, not its parts) and marks the start of each block on its stream; the stream time from one
// mark to the next belongs to the first mark's part. A span is GPU time plus any gap where the GPU
// waited for the host's launches, so at small batches (launch-bound when eager) the shares say
// where the eager step's wall time goes, not only kernel time.
#include <array>
#include <vector>

#include <cuda_runtime_api.h>

#include "model/model.h"

namespace parity::backend_cuda {

enum class StepPart : int {
  AttnProj,   // q, k, v, o projections
  AttnCore,   // RoPE, the KV-cache write, paged attention
  MambaGemm,  // in_proj and out_proj
  MambaConv,  // causal conv1d (+ SiLU)
  MambaSsd,   // dt (bias, softplus, clamp) and the SSD scan / SSU
  MambaNorm,  // the gated RMSNorm
  Moe,        // router GEMM, top-k routing, the experts and their combine
  SharedMlp,  // the shared SwiGLU MLP
  Other,      // embedding, layer norms, residual adds, final norm, lm_head
};
inline constexpr int kNumStepParts = 9;
const char* step_part_name(StepPart p);

class StepProfile {
 public:
  StepProfile() = default;
  ~StepProfile();
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;

  // From here to the next mark (or finish), the work queued on s is p's.
  void mark(StepPart p, cudaStream_t s);
  // Ends the pass's last span, waits for it, and adds the pass's spans to the totals.
  void finish(cudaStream_t s);

  double seconds(StepPart p) const { return seconds_[static_cast<std::size_t>(p)]; }
  double total_seconds() const;
  int passes() const { return passes_; }
  void clear();

 private:
  cudaEvent_t event(std::size_t i);  // the pass's i-th event, created once and reused
  std::vector<cudaEvent_t> events_;
  std::vector<StepPart> parts_;  // parts_[i]: the part of the span starting at events_[i]
  std::array<double, kNumStepParts> seconds_{};
  int passes_ = 0;
};

// A model's mark: nothing when no profile is attached.
inline void mark(StepProfile* p, StepPart part, cudaStream_t s) {
  if (p) p->mark(part, s);
}

// For benchmarks (defined in backend.cpp; m must be a CUDA model): attach a profile (every pass then
// runs eagerly and is timed into it) or detach it (nullptr).
void set_step_profile(model::Model& m, StepProfile* p);

}  // namespace parity::backend_cuda
