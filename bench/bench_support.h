#pragma once
// Set-up shared by the CPU benchmarks: the built-in models loaded once per process, random prompts, and
// the thread count a benchmark's argument asks for.
#include <omp.h>

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "kernels/isa.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace parity::bench {

// Loading takes seconds: every benchmark of a process shares one instance per name.
inline const model::Model& builtin_model(const std::string& name) {
  static std::vector<std::pair<std::string, std::unique_ptr<model::Model>>> loaded;
  for (const auto& [n, m] : loaded)
    if (n == name) return *m;
  loaded.emplace_back(name, model::load_model(model::open_checkpoint(name)));
  return *loaded.back().second;
}

inline const model::Model& m130() { return builtin_model("builtin:mamba2-130m"); }

inline std::vector<int32_t> random_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<std::size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % 50000);
  return t;
}

// Sets the kernels' thread count for a scope and restores it after.
class ThreadScope {
 public:
  explicit ThreadScope(int n) : saved_(kernels::num_threads()) { kernels::set_num_threads(n); }
  ~ThreadScope() { kernels::set_num_threads(saved_); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

// The thread count in argument `arg` (0: every thread OpenMP has).
inline int threads_arg(const benchmark::State& state, int arg = 1) {
  return state.range(arg) > 0 ? static_cast<int>(state.range(arg)) : omp_get_max_threads();
}

}  // namespace parity::bench
