#pragma once
// The flags of the engine's serving features, shared by the commands that run the engine:
//   --enable-prefix-caching, --prefix-block-tokens N, --prefix-cache-mb M (docs/prefix-caching.md);
//   --speculative-tokens K, --speculative-method ngram|draft, --draft-model SPEC, --ngram-min/-max
//   (docs/speculative-decoding.md); and the JSON reports of what they did. The values, their checks
//   and the draft model's loading are frontends::ServingOptions.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "frontends/common/serving_options.h"

namespace parity::cli {

using ServingFlags = frontends::ServingOptions;

void add_serving_flags(CLI::App* sub, ServingFlags& f);

// {"hits", "lookups", "hit_rate", "hit_tokens", "token_hit_rate", "cached_bytes", "cached_kv_blocks",
// "entries", "evictions", "budget_bytes", "block_tokens"}; null when prefix caching is off.
nlohmann::json prefix_cache_report(const engine::Engine& e);
// {"method", "num_tokens", "verify_chunks", "drafted", "accepted", "acceptance_rate", "rollbacks"};
// null when speculation is off.
nlohmann::json speculation_report(const engine::Engine& e);

}  // namespace parity::cli
