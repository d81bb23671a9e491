#pragma once
// The CUDA backend, as the frontends see it: whether it is here, and a Model that runs on the GPU.
// Built when CMake finds nvcc (PARITY_CUDA=AUTO|ON|OFF); without it every entry point says so.
#include <memory>
#include <string>

#include "model/checkpoint.h"
#include "model/model.h"

namespace parity::backend_cuda {

struct CudaModelOptions {
  // false: bf16 GEMM inputs on tensor cores (DESIGN.md rule 5); true: an fp32 FMA GEMM for
  // accuracy work (`--dtype float32`). Norms, conv, scan and state are fp32 either way.
  bool fp32 = false;
  // true: every pass launches its kernels one by one (vLLM's enforce_eager; --enforce-eager). false:
  // pure decode passes of up to 256 sequences replay CUDA graphs captured per batch-size bucket
  // (backend_cuda/decode_graphs.h), with the same bits.
  bool enforce_eager = false;
  // The MoE router's override pattern (model_options.h; --moe-routing): Direct or Fused, the same
  // bits either way, as on the CPU. Models without experts ignore it.
  model::MoeRoutingPattern moe_routing = model::MoeRoutingPattern::Direct;
};

bool built_with_cuda();
int device_count();  // 0 without a usable GPU (or when built without CUDA)
// "NVIDIA H200 (sm_90, 139.8 GiB)" or why there is none.
std::string describe_device();
// A GPU's free and total memory now (cudaMemGetInfo); throws parity::Error when it cannot be read.
model::DeviceMemory query_device_memory(int device = 0);

// Mamba2ForCausalLM or GraniteMoeHybridForCausalLM on GPU 0; throws parity::Error naming the problem
// (no CUDA build, no device, an architecture the backend does not run yet, a bad tensor).
std::unique_ptr<model::Model> load_model(const model::Checkpoint& ck, const CudaModelOptions& opt = {});
// The same split over tensor_parallel_size GPU ranks when it is above 1 (cuda_tensor_parallel.h: rank r
// on GPU r % device_count(), NCCL or host-staged sums); a split that does not fit is refused as on the CPU.
// The options have no default here: load_model(ck, {}) must mean the overload above, not tp = 0.
std::unique_ptr<model::Model> load_model(const model::Checkpoint& ck, int tensor_parallel_size,
                                         const CudaModelOptions& opt);

}  // namespace parity::backend_cuda
