#pragma once
// A CUDA stream a device model owns and launches everything on. Non-blocking: it never waits for
// (or makes anyone wait on) the legacy default stream, so nothing but the model's own work orders
// it, and it can be captured into a CUDA graph (the legacy stream cannot).
#include <utility>

#include <cuda_runtime_api.h>

#include "kernels_cuda/cuda_check.h"

namespace parity::cuda {

class Stream {
 public:
  Stream() { cuda_check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  ~Stream() {
    if (s_) cudaStreamDestroy(s_);
  }
  Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stream& operator=(Stream&&) = delete;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return s_; }
  void sync(const char* what) const { cuda_check(cudaStreamSynchronize(s_), what); }

 private:
  cudaStream_t s_ = nullptr;
};

}  // namespace parity::cuda
