#pragma once
// Comparing two captures files module by module and position by position, and finding the first
// module (in forward order) where the runs part.
//
// Per row (one module, one prompt, one position): max_abs = max_i |a_i − b_i|; scale = the larger
// of max_i |a_i| and max_i |b_i| (finite values); max_rel = max_abs / scale. A row parts when
// max_abs > atol + rtol · scale. A per-row scale rather than a per-element one keeps entries near
// zero from turning rounding noise into huge relative errors. NaN against a number, or two
// different infinities, count as an infinite error; NaN against NaN counts as equal.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "accuracy/captures_file.h"

namespace parity::accuracy {

struct CompareOptions {
  double atol = 0.0;
  double rtol = 0.0;
};

struct RowError {
  double max_abs = 0.0;
  double max_rel = 0.0;
  bool parts = false;
};

struct ModuleComparison {
  std::string name;
  int64_t cols = 0;
  std::vector<std::vector<RowError>> rows;  // [prompt][position]
  int64_t rows_compared = 0;
  int64_t rows_parting = 0;
  double max_abs = 0.0, max_rel = 0.0;
  int worst_prompt = -1;  // where max_abs is reached (-1: all equal)
  int64_t worst_position = -1;
  int first_prompt = -1;  // first parting row (prompt order, then position); -1: none
  int64_t first_position = -1;
};

struct Divergence {
  std::string module;
  int prompt = 0;
  int64_t position = 0;
  RowError error;
};

struct CompareResult {
  CompareOptions options;
  std::vector<ModuleComparison> modules;  // forward order
  std::optional<Divergence> first;         // first module in forward order with a parting row
  std::vector<std::string> notes;          // what was left out of the comparison, and why
};

// Throws parity::Error when the files cannot be compared: different prompts, a module with
// different feature sizes, no module in common.
CompareResult compare_captures(const Captures& a, const Captures& b, const CompareOptions& opt);

}  // namespace parity::accuracy
