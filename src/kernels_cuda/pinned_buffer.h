#pragma once
// Page-locked host memory of n elements of T: the staging a pass's metadata goes through on its
// way to the device, so the copy is a true cudaMemcpyAsync on the model's stream (from pageable
// memory the runtime would copy synchronously). Grows only; reused across passes. The owner must
// not rewrite it before the copies that read it have run (each forward ends with a stream sync).
#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/device_buffer.h"

namespace parity::cuda {

template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer() { reset(); }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&&) = delete;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void resize(std::size_t n) {
    if (n <= n_) return;
    reset();
    void* p = nullptr;
    cuda_check(cudaMallocHost(&p, n * sizeof(T)), "cudaMallocHost");
    p_ = static_cast<T*>(p);
    n_ = n;
  }
  void reset() {
    if (p_) cudaFreeHost(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* data() { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// v → staging → dev (grown if needed), queued on s. Returns dev's pointer.
template <typename T>
T* upload_async(const std::vector<T>& v, PinnedBuffer<T>& staging, DeviceBuffer<T>& dev, cudaStream_t s) {
  if (v.empty()) return dev.data();
  staging.resize(v.size());
  std::copy(v.begin(), v.end(), staging.data());
  dev.resize(v.size());
  cuda_check(cudaMemcpyAsync(dev.data(), staging.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s),
             "cudaMemcpyAsync to device");
  return dev.data();
}

}  // namespace parity::cuda
