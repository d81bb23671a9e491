#pragma once
// Probe points on device tensors (model/probe.h): when a hook wants a point, the tensor is copied
// to the host on the model's stream, the hook sees (or replaces) it, and it is copied back. With
// no hook, or a hook that does not want the point, nothing is copied. A probe waits for the
// stream, so a pass with any wanted point runs eagerly, never inside a CUDA graph.
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "model/forward_batch.h"
#include "model/probe.h"

namespace parity::backend_cuda {

class DeviceProbe {
 public:
  DeviceProbe(model::ProbeHooks* hooks, const model::ForwardBatch& b, cudaStream_t s);

  bool wants(const std::string& name) const { return hooks_ && hooks_->wants(name); }
  // dev [rows][ld] (cols used per row) → the hook → back (a replacement may change it).
  void operator()(const std::string& name, float* dev, int rows, int cols, int ld) const;
  // Seed 000's interception (the MoE router): when the point is wanted and the hook has a
  // replacement, it is written into dev [rows][ld] and true comes back; the caller then computes
  // nothing there and makes no visit.
  bool fetch_replacement(const std::string& name, float* dev, int rows, int cols, int ld) const;

 private:
  std::vector<float> to_host(const float* dev, int rows, int cols, int ld) const;
  void to_device(const std::vector<float>& h, float* dev, int rows, int cols, int ld) const;

  model::ProbeHooks* hooks_;
  model::ProbeRows meta_;
  cudaStream_t s_;
};

}  // namespace parity::backend_cuda
