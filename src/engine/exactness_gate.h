#pragma once
// The RFC's phase-1 gate (seed 003 §6) as a reusable routine: for random token streams, compare
// the raw logit rows the engine produces under several schedules with single-shot prefill, in
// exact and plain mode. `parity verify` prints it; the tests assert on it.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cache/numerics.h"
#include "common/dtype.h"
#include "model/model.h"

namespace parity::engine {

struct GateOptions {
  int prompt_len = 0;  // 0: 600 × chunk/256 (600 for chunk 256)
  int forced_len = 0;  // 0: 300 × chunk/256
  uint64_t seed = 1;
  std::vector<model::ScanMode> modes = {model::ScanMode::Exact, model::ScanMode::Plain};
  // Exact mode runs once per state dtype; plain mode with its default (bfloat16).
  std::vector<DType> exact_dtypes = {DType::F32, DType::BF16};
  std::optional<int> exact_grid;  // empty: the default cell
  cache::StaggerChoice stagger = cache::StaggerChoice::Auto;
  kernels::ScanProducts scan_products = kernels::ScanProducts::float32;  // exact mode's
  std::vector<std::string> scenarios;  // empty: all of gate_scenarios()
  bool prefix_caching = false;  // every scenario with prefix caching on (the prefix-cache scenario always is)
};

struct RowTally {
  int64_t rows = 0, mismatched = 0;
};

struct ScenarioResult {
  std::string scenario;  // the isa scenario reports one row per instruction set: isa-portable, …
  model::ScanMode mode;
  cache::Numerics numerics;
  std::string not_run;  // why the scenario could not run here (an ISA this CPU lacks); empty when it ran
  RowTally all, first_chunk, after_boundary;  // split by the chunk of the first compared row
  float max_abs = 0.0f;
  int64_t mismatched_elements = 0, elements = 0;
  std::string note;  // what the scenario exercised, e.g. prefix-cache hits
};

// decode, chunked-prefill, preempt-recompute, concurrent-8, threads-2 (two threads with every kernel
// forced parallel), isa (the decode schedule under each instruction set against the detected one),
// prefix-cache (requests that share prefixes of the stream, the later ones starting from cached
// state, under an unaligned token budget), speculative (generation with draft tokens verified
// several per pass, greedy and seeded, against single-shot prefill of the generated stream).
std::vector<std::string> gate_scenarios();

using GateProgress = std::function<void(int done, int total, const std::string& what)>;

std::vector<ScenarioResult> run_exactness_gate(const model::Model& m, const GateOptions& opt,
                                               const GateProgress& progress = {});

std::string format_gate_table(const std::vector<ScenarioResult>& results);
const char* mode_name(model::ScanMode m);

}  // namespace parity::engine
