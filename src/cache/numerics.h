#pragma once
// How a run rounds: plain or exact mode and, in exact mode, its identity (DESIGN.md rules 6–7):
// the exact grid's cell G, the per-head stagger, the scan's products and the SSM state dtype. Logits and
// captures are bit-reproducible only for the same identity, so every file that carries them records it
// (metadata()) and compare / validate say when two files were made with different ones.
#include <map>
#include <optional>
#include <string>

#include "common/dtype.h"
#include "kernels/exact_grid.h"

namespace parity::cache {

enum class StaggerChoice { Auto, None, Spread };  // Auto: spread unless the cell is the chunk size

struct Numerics {
  bool exact = false;
  DType ssm_dtype = DType::BF16;
  kernels::ExactGrid grid;  // meaningful in exact mode
  // Where it ran: another backend or tensor-parallel degree computes other bits (same backend, grid and degree
  // ⇒ same bits). Set from the model (model::stamp_backend); the defaults are a one-rank CPU run.
  std::string device = "cpu";
  int tensor_parallel = 1;

  // {"numerics": "exact"|"plain", "ssm_state_dtype": ..., in exact mode "exact_grid", "exact_stagger" and,
  // when not float32, "exact_scan_products", and "device" / "tensor_parallel" when not cpu / 1}: the keys files
  // carry (a CPU one-rank file keeps the keys files had before the last three existed, and a missing key reads
  // as its default).
  std::map<std::string, std::string> metadata() const;
  std::string describe() const;  // e.g. "exact (grid 8, stagger spread, state float32)"
};

// What the flags ask for; empty fields take the defaults: bfloat16 in plain mode (vLLM's), float32
// in exact mode, the backend's default cell, the stagger by StaggerChoice::Auto. Throws
// parity::Error naming the flag for a cell that is not a power of two in [1, 4096].
// default_cell is the backend's measured best cell (model::Model::default_exact_cell()).
// products other than float32 need exact mode (else parity::Error naming --scan-products); whether the
// backend can form them is the model's check (model::Model::exact_refusal).
Numerics resolve_numerics(bool exact, std::optional<DType> ssm_dtype, std::optional<int> exact_cell,
                          StaggerChoice stagger, int chunk_size, int default_cell = kernels::kDefaultExactCell,
                          kernels::ScanProducts products = kernels::ScanProducts::float32);

StaggerChoice parse_stagger(const std::string& s);  // auto | none | spread, else parity::Error
// float32 | bfloat16 | split, else parity::Error naming --scan-products.
kernels::ScanProducts parse_scan_products(const std::string& s);
// Throws parity::Error naming --scan-products for products other than float32 outside exact mode.
void validate_scan_products(bool exact, kernels::ScanProducts products);
const char* scan_products_name(kernels::ScanProducts p);

// Throws parity::Error naming --exact-grid unless cell is a power of two in [1, 4096].
void validate_exact_cell(int cell);

// The identity keys on which two files' metadata differ, e.g. "exact_grid 16 vs 256"; empty when
// they agree or when either records none (a file from another tool, e.g. a Hugging Face reference).
std::string numerics_difference(const std::map<std::string, std::string>& a,
                                const std::map<std::string, std::string>& b);

}  // namespace parity::cache
