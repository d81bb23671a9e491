#pragma once
// builtin:mamba2-2.7b on the GPU, loaded once per process and shared by every benchmark that runs it
// (the end-to-end decode and prefill in cuda_bench.cpp, the decode step's parts in
// cuda_decode_budget_bench.cpp): one copy of its 5.4 GB of weights.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "cache/model_cache.h"
#include "model/model.h"

namespace parity::bench {

model::Model& mamba2_2p7b();

// A decode batch ready to time: `batch` sequences prefilled with 16 tokens each, then one decode step run
// untimed (it captures the bucket's graph when graphs are on). The timed loop moves every sequence's start
// to `pos` and advances it. The state dtype is the mode's default unless `ssm_dtype` says otherwise.
struct DecodeRun {
  cache::ModelCache mc;
  model::ForwardBatch d;
  model::HostFloats logits;  // the model's host memory (page-locked) unless prepared with pinned = false
  model::ScanMode mode;
  int64_t pos;
};
// pinned = false: the logits in ordinary (pageable, pre-faulted) memory, as before session 24.
DecodeRun prepare_decode(model::Model& m, bool exact, int batch, std::optional<DType> ssm_dtype = std::nullopt,
                         bool pinned = true, kernels::ScanProducts products = kernels::ScanProducts::float32);
// The benchmarks' loop over decode steps of `run`: each iteration moves every sequence's start to run.pos, times
// Model::forward from the host (its wall time: the iteration's manual time) and advances run.pos. Returns the
// mean step in seconds.
double time_decode_steps(benchmark::State& state, model::Model& m, DecodeRun& run);

}  // namespace parity::bench
