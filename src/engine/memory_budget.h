#pragma once
// The bytes the engine's caches (Mamba state, replay rows, KV blocks, prefix cache) may take: the
// budget asked for, or a share of a GPU's memory as vLLM's --gpu-memory-utilization gives it.
#include <cstddef>

#include "model/model.h"

namespace parity::engine {

// state_memory_budget > 0 wins; gpu_memory_utilization > 0 (in (0, 1]) takes the device's free
// memory minus (1 - utilization) of its total; 0 for neither (the planner's per-slot default).
// Throws parity::Error naming the problem: both given, a utilization outside (0, 1], a model that
// is not on a GPU, or a share that leaves nothing.
std::size_t cache_budget(const model::Model& m, std::size_t state_memory_budget, double gpu_memory_utilization);

}  // namespace parity::engine
