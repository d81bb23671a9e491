#include "engine/memory_budget.h"

#include <cstdio>
#include <string>

#include "common/error.h"

namespace parity::engine {
namespace {

std::string gib(double bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return b;
}

}  // namespace

std::size_t cache_budget(const model::Model& m, std::size_t state_memory_budget, double gpu_memory_utilization) {
  if (gpu_memory_utilization == 0) return state_memory_budget;
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1))
    throw Error("--gpu-memory-utilization must be in (0, 1], got " + std::to_string(gpu_memory_utilization));
  if (state_memory_budget > 0)
    throw Error("give either --state-memory-mb or --gpu-memory-utilization, not both");
  const std::optional<model::DeviceMemory> dm = m.device_memory();
  if (!dm)
    throw Error("--gpu-memory-utilization sizes the caches of a model on a GPU; " + m.origin() + " runs on " +
                m.device() + " (use --state-memory-mb)");
  // What must stay free: the share of the device not given to parity (headroom for activations,
  // the CUDA context and other processes), out of what is free after the weights.
  const double keep = (1.0 - gpu_memory_utilization) * static_cast<double>(dm->total_bytes);
  const double budget = static_cast<double>(dm->free_bytes) - keep;
  if (budget <= 0)
    throw Error("--gpu-memory-utilization " + std::to_string(gpu_memory_utilization) + " leaves no memory for the " +
                "caches: " + gib(static_cast<double>(dm->free_bytes)) + " free of " +
                gib(static_cast<double>(dm->total_bytes)) + " after the weights, " + gib(keep) + " to keep free");
  return static_cast<std::size_t>(budget);
}

}  // namespace parity::engine
