#pragma once
// --device cpu|cuda and --dtype (the GPU's GEMM input type), shared by every command that runs a
// model. The values and the loading are frontends::DeviceOptions, which the Python module shares.
#include <CLI/CLI.hpp>

#include "frontends/common/device_options.h"

namespace parity::cli {

using DeviceFlags = frontends::DeviceOptions;

void add_device_flags(CLI::App* sub, DeviceFlags& f);

}  // namespace parity::cli
