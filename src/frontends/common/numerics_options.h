#pragma once
// A run's numerics as every frontend takes them (the CLI's --exact, --mamba-ssm-cache-dtype,
// --exact-grid, --exact-stagger, --scan-products; the Python module's keyword arguments of the same
// names):
// checked, resolved against the model's chunk size into cache::Numerics (whose metadata() every
// output file carries) and applied to an engine configuration.
#include <string>

#include "cache/numerics.h"
#include "engine/engine.h"

namespace parity::frontends {

struct NumericsOptions {
  bool exact = false;
  std::string cache_dtype;  // "float32" | "bfloat16"; empty: the mode's default
  int exact_grid = -1;      // -1: the default
  std::string stagger = "auto";
  std::string scan_products = "float32";  // exact mode's scan products: float32 | bfloat16 | split

  // Checks what can be checked before a model is loaded (dtype, grid, stagger names).
  void check() const;
  // default_cell: the backend's exact cell when exact_grid is not given (the GPU's differs).
  cache::Numerics resolve(int chunk_size, int default_cell = kernels::kDefaultExactCell) const;
  // Against a loaded model: its chunk size and default cell, stamped with its backend and TP degree.
  cache::Numerics resolve(const model::Model& m) const;
  void apply(engine::EngineConfig& cfg) const;  // mode, dtype, grid, stagger, products
};

}  // namespace parity::frontends
