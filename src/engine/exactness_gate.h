#pragma once
// The RFC's phase-1 gate (seed 003 §6) as a reusable routine: for random token streams, compare
// the raw logit rows the engine produces under several schedules with single-shot prefill, in
// exact and plain mode. `parity verify` prints it; the tests assert on it.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/model.h"

namespace parity::engine {

struct GateOptions {
  int prompt_len = 0;  // 0: 600 × chunk/256 (600 for chunk 256)
  int forced_len = 0;  // 0: 300 × chunk/256
  uint64_t seed = 1;
  std::vector<model::ScanMode> modes = {model::ScanMode::Exact, model::ScanMode::Plain};
  std::vector<std::string> scenarios;  // empty: all of gate_scenarios()
};

struct RowTally {
  int64_t rows = 0, mismatched = 0;
};

struct ScenarioResult {
  std::string scenario;
  model::ScanMode mode;
  RowTally all, first_chunk, after_boundary;  // split by the chunk of the first compared row
  float max_abs = 0.0f;
  int64_t mismatched_elements = 0, elements = 0;
};

std::vector<std::string> gate_scenarios();  // decode, chunked-prefill, preempt-recompute, concurrent-8, threads-2

using GateProgress = std::function<void(int done, int total, const std::string& what)>;

std::vector<ScenarioResult> run_exactness_gate(const model::Model& m, const GateOptions& opt,
                                               const GateProgress& progress = {});

std::string format_gate_table(const std::vector<ScenarioResult>& results);
const char* mode_name(model::ScanMode m);

}  // namespace parity::engine
