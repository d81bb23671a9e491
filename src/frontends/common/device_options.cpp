#include "frontends/common/device_options.h"

#include <cstdio>
#include <string>

#include "backend_cuda/backend.h"
#include "common/error.h"
#include "model/checkpoint.h"
#include "model/tensor_parallel_model.h"

namespace parity::frontends {

std::unique_ptr<model::Model> DeviceOptions::load(const std::string& spec, const model::ModelOptions& mo) const {
  if (device != "cpu" && device != "cuda") throw Error("--device must be cpu or cuda, not '" + device + "'");
  if (!dtype.empty() && dtype != "bfloat16" && dtype != "float32")
    throw Error("--dtype must be bfloat16 or float32, not '" + dtype + "'");
  if (tensor_parallel_size < 1 || tensor_parallel_size > 64)
    throw Error("--tensor-parallel-size must be between 1 and 64, not " + std::to_string(tensor_parallel_size));
  if (device == "cpu") {
    if (!dtype.empty() && dtype != "float32")
      throw Error("--dtype " + dtype + ": the CPU computes in float32 (bf16/fp16 weights are widened exactly)");
    return model::load_model(model::open_checkpoint(spec), tensor_parallel_size, mo);
  }
  backend_cuda::CudaModelOptions o;
  o.fp32 = dtype == "float32";
  o.enforce_eager = enforce_eager;
  o.moe_routing = mo.moe_routing;
  auto m = backend_cuda::load_model(model::open_checkpoint(spec), tensor_parallel_size, o);
  // Which GPUs the ranks landed on and which collective sums their partials (NCCL or host-staged)
  // depends on the machine: every command says so.
  if (const std::string where = m->placement(); !where.empty()) std::fprintf(stderr, "note: %s\n", where.c_str());
  return m;
}

}  // namespace parity::frontends
