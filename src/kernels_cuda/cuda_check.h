#pragma once
// Every CUDA runtime call goes through cuda_check: an error becomes a parity::Error naming the call,
// so a bad launch or an out-of-memory ends as a one-line message, not a crash.
#include <string>

#include <cuda_runtime_api.h>

#include "common/error.h"

namespace parity::cuda {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw Error(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

// After a launch: the launch configuration error, if any (asynchronous faults surface at the next sync).
inline void check_launch(const char* kernel) { cuda_check(cudaGetLastError(), kernel); }

}  // namespace parity::cuda
