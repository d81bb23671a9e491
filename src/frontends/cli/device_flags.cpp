#include "frontends/cli/device_flags.h"

#include "backend_cuda/backend.h"
#include "common/error.h"
#include "model/checkpoint.h"

namespace parity::cli {

void add_device_flags(CLI::App* sub, DeviceFlags& f) {
  sub->add_option("--device", f.device, "cpu (default) or cuda (GPU 0)")->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--dtype", f.dtype,
                  "with --device cuda: bfloat16 GEMM inputs on tensor cores (default) or float32 (accuracy work)")
      ->check(CLI::IsMember({"bfloat16", "float32"}));
}

std::unique_ptr<model::Model> DeviceFlags::load(const std::string& spec, const model::ModelOptions& mo) const {
  if (device == "cpu") {
    if (!dtype.empty() && dtype != "float32")
      throw Error("--dtype " + dtype + ": the CPU computes in float32 (bf16/fp16 weights are widened exactly)");
    return model::load_model(model::open_checkpoint(spec), mo);
  }
  backend_cuda::CudaModelOptions o;
  o.fp32 = dtype == "float32";
  return backend_cuda::load_model(model::open_checkpoint(spec), o);
}

}  // namespace parity::cli
