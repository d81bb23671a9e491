#pragma once
// The flags that choose a run's numerics, shared by every command that runs the model:
//   --exact (alias --mamba-exact-replay, the RFC's name), --mamba-ssm-cache-dtype float32|bfloat16,
//   --exact-grid N (a power of two; default: this backend's measured best), --exact-stagger
//   auto|none|spread. Resolved against the model's chunk size into cache::Numerics, whose
//   metadata() every output file carries.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "cache/numerics.h"
#include "engine/engine.h"

namespace parity::cli {

struct NumericsFlags {
  bool exact = false;
  std::string cache_dtype;  // empty: the mode's default
  int exact_grid = -1;      // -1: the default
  std::string stagger = "auto";

  // Checks what can be checked before a model is loaded (dtype, grid, stagger names).
  void check() const;
  cache::Numerics resolve(int chunk_size, int default_cell = kernels::kDefaultExactCell) const;
  void apply(engine::EngineConfig& cfg) const;  // mode, dtype, grid, stagger
};

void add_numerics_flags(CLI::App* sub, NumericsFlags& f);

}  // namespace parity::cli
