#pragma once
// The flags that choose a run's numerics, shared by every command that runs the model:
//   --exact (alias --mamba-exact-replay, the RFC's name), --mamba-ssm-cache-dtype float32|bfloat16,
//   --exact-grid N (a power of two; default: this backend's measured best), --exact-stagger
//   auto|none|spread, --scan-products float32|bfloat16|split. The values, their checks and their resolution
//   are frontends::NumericsOptions, which the Python module shares.
#include <CLI/CLI.hpp>

#include "frontends/common/numerics_options.h"

namespace parity::cli {

using NumericsFlags = frontends::NumericsOptions;

void add_numerics_flags(CLI::App* sub, NumericsFlags& f);

}  // namespace parity::cli
