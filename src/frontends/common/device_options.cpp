#include "frontends/common/device_options.h"

#include "backend_cuda/backend.h"
#include "common/error.h"
#include "model/checkpoint.h"

namespace parity::frontends {

std::unique_ptr<model::Model> DeviceOptions::load(const std::string& spec, const model::ModelOptions& mo) const {
  if (device != "cpu" && device != "cuda") throw Error("--device must be cpu or cuda, not '" + device + "'");
  if (!dtype.empty() && dtype != "bfloat16" && dtype != "float32")
    throw Error("--dtype must be bfloat16 or float32, not '" + dtype + "'");
  if (device == "cpu") {
    if (!dtype.empty() && dtype != "float32")
      throw Error("--dtype " + dtype + ": the CPU computes in float32 (bf16/fp16 weights are widened exactly)");
    return model::load_model(model::open_checkpoint(spec), mo);
  }
  backend_cuda::CudaModelOptions o;
  o.fp32 = dtype == "float32";
  o.enforce_eager = enforce_eager;
  return backend_cuda::load_model(model::open_checkpoint(spec), o);
}

}  // namespace parity::frontends
