#pragma once
// Owned device memory of n elements of T. Moves, never copies; frees on destruction.
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "kernels_cuda/cuda_check.h"

namespace parity::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t n) { resize(n); }
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Reallocates only to grow: scratch buffers keep their memory across passes.
  void resize(std::size_t n) {
    if (n <= n_) return;
    reset();
    void* p = nullptr;
    cuda_check(cudaMalloc(&p, n * sizeof(T)), "cudaMalloc");
    p_ = static_cast<T*>(p);
    n_ = n;
  }
  void reset() {
    if (p_) cudaFree(p_);
    p_ = nullptr;
    n_ = 0;
  }
  void zero(cudaStream_t s = nullptr) {
    if (n_) cuda_check(cudaMemsetAsync(p_, 0, n_ * sizeof(T), s), "cudaMemsetAsync");
  }
  // From pageable memory cudaMemcpy may return once the bytes are staged, before the DMA lands, and
  // the kernels run on non-blocking streams that do not wait for the legacy stream: wait for it here,
  // so that whatever is enqueued after upload() returns reads the new contents (a test's collective
  // once read a rank's partial before it arrived).
  void upload(const T* src, std::size_t n) {
    resize(n);
    cuda_check(cudaMemcpy(p_, src, n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to device");
    cuda_check(cudaStreamSynchronize(cudaStreamLegacy), "cudaMemcpy to device (wait)");
  }
  void upload(const std::vector<T>& v) { upload(v.data(), v.size()); }
  std::vector<T> download(std::size_t n) const {
    std::vector<T> v(n);
    if (n) cuda_check(cudaMemcpy(v.data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to host");
    return v;
  }

  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace parity::cuda
