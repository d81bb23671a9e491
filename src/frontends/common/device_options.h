#pragma once
// Where a model runs, as every frontend takes it (the CLI's --device cpu|cuda and --dtype; the
// Python module's device= and dtype=). The one place a frontend chooses a backend: model and engine
// code never ask.
#include <memory>
#include <string>

#include "model/model.h"
#include "model/model_options.h"

namespace parity::frontends {

struct DeviceOptions {
  std::string device = "cpu";
  std::string dtype;  // empty: bfloat16 on cuda; float32 is the GPU's accuracy path
  // Ranks the model is split over (docs/tensor-parallel.md): CPU ranks are worker threads of this
  // process; GPU ranks are threads too, rank r on GPU r % device count, with NCCL or host-staged sums.
  int tensor_parallel_size = 1;
  // cuda: launch every pass kernel by kernel, no CUDA graphs (vLLM's enforce_eager). The bits are
  // the same either way; the CPU has no graphs and ignores it.
  bool enforce_eager = false;

  // Loads MODEL (checkpoint folder or builtin:NAME) on the chosen device; parity::Error names
  // what is wrong (no CUDA build, no GPU, an architecture the GPU does not run, --dtype on cpu, a
  // tensor-parallel split that does not fit the model).
  std::unique_ptr<model::Model> load(const std::string& spec, const model::ModelOptions& mo = {}) const;
};

}  // namespace parity::frontends
