#pragma once
// Host-side helpers the GEMM and SSD launchers share: runtime calls that must not be recorded into a
// CUDA graph, the device's SM count, blocks an SM holds, and the per-device opt-in to more than 48 KiB
// of shared memory.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <tuple>

#include <cuda_runtime_api.h>

#include "kernels_cuda/cuda_check.h"

namespace parity::cuda {

// cudaMalloc and cudaFuncSetAttribute are no stream operations, but a stream capture in this thread
// (a CUDA graph being recorded) would refuse them as potentially unsafe; they are safe here.
template <typename F>
void outside_capture(F&& call, const char* what) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cuda_check(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
  const cudaError_t err = call();
  cuda_check(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
  cuda_check(err, what);
}

inline int sm_count() {
  int device = 0, sms = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  cuda_check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "cudaDeviceGetAttribute");
  return sms;
}

// Blocks of `kernel` (`threads` a block, `smem` bytes of dynamic shared memory) an SM holds, asked of the
// runtime once per device, kernel, threads and size (launchers ask on every launch). The kernel's
// attributes (its shared-memory limit and carveout) must be set before the first question.
template <class Kernel>
int blocks_per_sm(Kernel* kernel, int threads, std::size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<int, const void*, int, std::size_t>, int> known;
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  const std::lock_guard<std::mutex> lock(mu);
  const auto key = std::tuple{device, reinterpret_cast<const void*>(kernel), threads, smem};
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int per_sm = 0;
  outside_capture([&] { return cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem); },
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
  return known[key] = per_sm;
}

// Lets `kernel` launch with up to `bytes` of dynamic shared memory on the current device. The
// opt-in is per device; `opted` (one per kernel, kept by the caller) remembers the devices done.
// max_carveout: ask for the largest shared-memory share of the SM's L1 too, so that as many blocks
// as the shared memory allows fit on an SM (the driver may otherwise pick a smaller share).
inline void allow_dynamic_smem(const void* kernel, int bytes, std::atomic<std::uint64_t>& opted,
                               bool max_carveout = false) {
  int device = 0;
  cuda_check(cudaGetDevice(&device), "cudaGetDevice");
  const std::uint64_t bit = std::uint64_t(1) << (device % 64);
  if (opted.load() & bit) return;
  outside_capture([&] { return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes); },
                  "cudaFuncSetAttribute");
  if (max_carveout)
    outside_capture(
        [&] {
          return cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared);
        },
        "cudaFuncSetAttribute");
  opted.fetch_or(bit);
}

}  // namespace parity::cuda
