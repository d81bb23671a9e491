// The CUDA backend's stand-in in a build without nvcc (PARITY_CUDA=OFF, or AUTO without CUDA).
#include "backend_cuda/backend.h"
#include "common/error.h"

namespace parity::backend_cuda {

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string describe_device() { return "parity was built without CUDA (PARITY_CUDA=OFF or nvcc not found)"; }

model::DeviceMemory query_device_memory(int) { throw Error("--device cuda: " + describe_device()); }

std::unique_ptr<model::Model> load_model(const model::Checkpoint&, const CudaModelOptions&) {
  throw Error("--device cuda: " + describe_device());
}

std::unique_ptr<model::Model> load_model(const model::Checkpoint&, int, const CudaModelOptions&) {
  throw Error("--device cuda: " + describe_device());
}

}  // namespace parity::backend_cuda
