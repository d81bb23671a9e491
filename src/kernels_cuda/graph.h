#pragma once
// A CUDA graph captured from a stream and instantiated once, then replayed with one launch: the
// host cost of a pass's hundreds of kernel launches becomes one call. Capture records launches
// without running them; every pointer and launch shape is frozen into the graph, so what it reads
// and writes must stay at the same addresses for the graph's life.
#include <functional>
#include <utility>

#include <cuda_runtime_api.h>

#include "kernels_cuda/cuda_check.h"

namespace parity::cuda {

class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraphExec_t e) : e_(e) {}
  ~GraphExec() {
    if (e_) cudaGraphExecDestroy(e_);
  }
  GraphExec(GraphExec&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    if (this != &o) {
      if (e_) cudaGraphExecDestroy(e_);
      e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  explicit operator bool() const { return e_ != nullptr; }
  void launch(cudaStream_t s) const { cuda_check(cudaGraphLaunch(e_, s), "cudaGraphLaunch"); }

 private:
  cudaGraphExec_t e_ = nullptr;
};

// Records what `enqueue` queues on s (nothing runs) and instantiates it. Thread-local capture
// mode: a call on this thread that cannot be captured (cudaMalloc, a synchronous copy, a sync)
// fails the capture loudly instead of being silently left out of the graph. If `enqueue` throws,
// the capture is ended and discarded, and the stream is usable again.
inline GraphExec capture_graph(cudaStream_t s, const std::function<void()>& enqueue) {
  cuda_check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  try {
    enqueue();
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(s, &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();  // the capture's error is reported by the exception, not by the next call
    throw;
  }
  cudaGraph_t g = nullptr;
  cuda_check(cudaStreamEndCapture(s, &g), "cudaStreamEndCapture");
  cudaGraphExec_t e = nullptr;
  const cudaError_t r = cudaGraphInstantiate(&e, g, 0);
  cudaGraphDestroy(g);
  cuda_check(r, "cudaGraphInstantiate");
  return GraphExec(e);
}

}  // namespace parity::cuda
