#pragma once
// The cache a GPU benchmark runs on: `slots` sequences with the mode's default numerics (grid, state dtype;
// `ssm_dtype` overrides the latter, `products` the scan's products in exact mode), and, when kv_tokens > 0,
// paged KV blocks of 16 for kv_tokens tokens per sequence.
#include <cstdint>
#include <optional>

#include "cache/model_cache.h"
#include "model/model.h"

namespace parity::bench {

inline cache::ModelCache bench_cache(const model::Model& m, bool exact, int slots, int64_t kv_tokens = 0,
                                     std::optional<DType> ssm_dtype = std::nullopt,
                                     kernels::ScanProducts products = kernels::ScanProducts::float32) {
  cache::Numerics num = model::default_numerics(m, exact ? model::ScanMode::Exact : model::ScanMode::Plain);
  if (ssm_dtype) num.ssm_dtype = *ssm_dtype;
  if (exact) num.grid.products = products;
  num = model::stamp_backend(m, num);  // the model's refusal, if any, before a pass
  cache::ModelCacheOptions o;
  o.mamba.num_slots = slots;
  o.mamba.exact = num.exact;
  o.mamba.grid = num.grid;
  o.mamba.ssm_dtype = num.ssm_dtype;
  if (kv_tokens > 0) {
    o.kv_block_size = 16;
    o.kv_num_blocks = static_cast<int>(slots * ((kv_tokens + 15) / 16));
  }
  return cache::ModelCache(m.cache_spec(), o);
}

}  // namespace parity::bench
