#pragma once
// --device cpu|cuda and --dtype (the GPU's GEMM input type), shared by every command that runs a
// model. The one place a frontend chooses a backend: model and engine code never ask.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "model/model.h"
#include "model/model_options.h"

namespace parity::cli {

struct DeviceFlags {
  std::string device = "cpu";
  std::string dtype;  // empty: bfloat16 on cuda; float32 is the GPU's accuracy path

  // Loads MODEL (checkpoint folder or builtin:NAME) on the chosen device; parity::Error names
  // what is wrong (no CUDA build, no GPU, an architecture the GPU does not run, --dtype on cpu).
  std::unique_ptr<model::Model> load(const std::string& spec, const model::ModelOptions& mo = {}) const;
};

void add_device_flags(CLI::App* sub, DeviceFlags& f);

}  // namespace parity::cli
