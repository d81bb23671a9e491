#include "backend_cuda/device_probe.h"

#include "kernels_cuda/cuda_check.h"
#include "model/model.h"

namespace parity::backend_cuda {

DeviceProbe::DeviceProbe(model::ProbeHooks* hooks, const model::ForwardBatch& b, cudaStream_t s)
    : hooks_(hooks), meta_(model::probe_rows(b, hooks)), s_(s) {}

std::vector<float> DeviceProbe::to_host(const float* dev, int rows, int cols, int ld) const {
  std::vector<float> h(static_cast<std::size_t>(rows) * cols);
  cuda::cuda_check(cudaMemcpy2DAsync(h.data(), cols * 4, dev, static_cast<std::size_t>(ld) * 4, cols * 4, rows,
                                     cudaMemcpyDeviceToHost, s_),
                   "probe copy");
  cuda::cuda_check(cudaStreamSynchronize(s_), "probe copy");
  return h;
}

void DeviceProbe::to_device(const std::vector<float>& h, float* dev, int rows, int cols, int ld) const {
  cuda::cuda_check(cudaMemcpy2DAsync(dev, static_cast<std::size_t>(ld) * 4, h.data(), cols * 4, cols * 4, rows,
                                     cudaMemcpyHostToDevice, s_),
                   "probe copy back");
  cuda::cuda_check(cudaStreamSynchronize(s_), "probe copy back");  // h is freed when the caller returns
}

void DeviceProbe::operator()(const std::string& name, float* dev, int rows, int cols, int ld) const {
  if (!wants(name)) return;
  std::vector<float> h = to_host(dev, rows, cols, ld);
  hooks_->visit(name, h.data(), rows, cols, meta_);
  to_device(h, dev, rows, cols, ld);
}

bool DeviceProbe::fetch_replacement(const std::string& name, float* dev, int rows, int cols, int ld) const {
  if (!wants(name)) return false;
  std::vector<float> h(static_cast<std::size_t>(rows) * cols);
  if (!hooks_->fetch_replacement(name, h.data(), rows, cols, meta_)) return false;
  to_device(h, dev, rows, cols, ld);
  return true;
}

}  // namespace parity::backend_cuda
