#include "backend_cuda/backend.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include <cuda_runtime_api.h>

#include "backend_cuda/cuda_hybrid_model.h"
#include "backend_cuda/cuda_mamba2_model.h"
#include "backend_cuda/cuda_tensor_parallel.h"
#include "backend_cuda/decode_graphs.h"
#include "backend_cuda/step_profile.h"
#include "backend_cuda/device_guard.h"
#include "common/error.h"
#include "io/hf_config.h"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/persistent_decode.h"
#include "kernels_cuda/ssd_tc.h"
#include "model/tensor_parallel_model.h"

namespace parity::backend_cuda {

bool built_with_cuda() { return true; }

int device_count() { return cuda::device_count(); }

std::string describe_device() {
  if (cuda::device_count() == 0) return "no CUDA device is visible (no GPU or no driver)";
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return "CUDA device 0 could not be queried";
  char buf[512];
  std::snprintf(buf, sizeof buf, "%.256s (sm_%d%d, %.1f GiB)", p.name, p.major, p.minor,
                static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

model::DeviceMemory query_device_memory(int device) {
  DeviceGuard on(device);
  std::size_t free = 0, total = 0;
  cuda::cuda_check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return {free, total};
}

namespace {

// PARITY_CUDA_PERSISTENT_DECODE=off|ring|next-l2 (kernels_cuda/persistent_decode.h) switches the batch-1
// persistent decode step for the process; unset leaves the mode as it is (off unless a caller set it).
void persistent_mode_from_env() {
  const char* v = std::getenv("PARITY_CUDA_PERSISTENT_DECODE");
  if (!v) return;
  const std::string s = v;
  if (s == "off") cuda::set_persistent_decode(cuda::kPersistentOff);
  else if (s == "ring") cuda::set_persistent_decode(cuda::kPersistentRing);
  else if (s == "next-l2") cuda::set_persistent_decode(cuda::kPersistentNextL2);
  else throw Error("PARITY_CUDA_PERSISTENT_DECODE must be off, ring or next-l2, not '" + s + "'");
}

// PARITY_CUDA_TC_LAUNCH=ordinary|programmatic|programmatic-band (kernels_cuda/ssd_tc.h's set_ssd_tc_programmatic)
// chooses how the tensor-core scan's launches go, for the process; unset leaves it as it is (programmatic-band,
// kSsdTcProgrammaticDefault, unless a caller set it).
void tc_launch_from_env() {
  const char* v = std::getenv("PARITY_CUDA_TC_LAUNCH");
  if (!v) return;
  const std::string s = v;
  if (s == "ordinary") cuda::set_ssd_tc_programmatic(0);
  else if (s == "programmatic") cuda::set_ssd_tc_programmatic(1);
  else if (s == "programmatic-band") cuda::set_ssd_tc_programmatic(2);
  else throw Error("PARITY_CUDA_TC_LAUNCH must be ordinary, programmatic or programmatic-band, not '" + s + "'");
}

}  // namespace

std::unique_ptr<model::Model> load_model(const model::Checkpoint& ck, const CudaModelOptions& opt) {
  persistent_mode_from_env();
  tc_launch_from_env();
  // Mamba2 has no experts: the MoE routing pattern does not apply (as on the CPU).
  if (io::architecture_of(ck.config) == "GraniteMoeHybridForCausalLM") return CudaHybridModel::load(ck, opt);
  return CudaMamba2Model::load(ck, opt);
}

std::unique_ptr<model::Model> load_model(const model::Checkpoint& ck, int tensor_parallel_size,
                                         const CudaModelOptions& opt) {
  if (tensor_parallel_size == 1) return load_model(ck, opt);
  persistent_mode_from_env();  // refuses a bad value here too (the ranks' passes never take the step)
  tc_launch_from_env();
  return load_tensor_parallel(ck, tensor_parallel_size, opt);
}

CudaGraphStats cuda_graph_stats(const model::Model& m) {
  if (const auto* h = dynamic_cast<const CudaHybridModel*>(&m)) return h->graph_stats();
  if (const auto* g = dynamic_cast<const CudaMamba2Model*>(&m)) return g->graph_stats();
  if (const auto* tp = dynamic_cast<const model::TensorParallelModel*>(&m)) return cuda_graph_stats(tp->rank(0));
  throw Error("cuda_graph_stats: not a CUDA model");
}

void set_enforce_eager(model::Model& m, bool eager) {
  if (auto* h = dynamic_cast<CudaHybridModel*>(&m)) return h->set_enforce_eager(eager);
  if (auto* g = dynamic_cast<CudaMamba2Model*>(&m)) return g->set_enforce_eager(eager);
  // Tensor-parallel GPU ranks always run eagerly (cuda_tensor_parallel.h): there is nothing to switch.
  if (dynamic_cast<model::TensorParallelModel*>(&m) && std::string(m.device()) == "cuda") return;
  throw Error("set_enforce_eager: not a CUDA model");
}

void set_fuse_kernels(model::Model& m, bool fuse) {
  if (auto* h = dynamic_cast<CudaHybridModel*>(&m)) return h->set_fuse_kernels(fuse);
  if (auto* g = dynamic_cast<CudaMamba2Model*>(&m)) return g->set_fuse_kernels(fuse);
  throw Error("set_fuse_kernels: not a CUDA model");
}

void set_decode_skip(model::Model& m, unsigned skip) {
  if (auto* g = dynamic_cast<CudaMamba2Model*>(&m)) return g->set_decode_skip(skip);
  throw Error("set_decode_skip: not a CUDA Mamba2 model");
}

void set_step_profile(model::Model& m, StepProfile* p) {
  if (auto* h = dynamic_cast<CudaHybridModel*>(&m)) return h->set_step_profile(p);
  if (auto* g = dynamic_cast<CudaMamba2Model*>(&m)) return g->set_step_profile(p);
  throw Error("set_step_profile: not a CUDA model");
}

}  // namespace parity::backend_cuda
