#pragma once
// The flags of the engine's serving features, shared by the commands that run the engine:
//   --enable-prefix-caching, --prefix-block-tokens N, --prefix-cache-mb M (docs/prefix-caching.md);
//   --speculative-tokens K, --speculative-method ngram|draft, --draft-model SPEC, --ngram-min/-max
//   (docs/speculative-decoding.md); and the JSON reports of what they did.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace parity::cli {

struct ServingFlags {
  bool prefix_caching = false;
  int prefix_block_tokens = 256;
  double prefix_cache_mb = 0;  // 0: the planner's default
  int speculative_tokens = 0;
  std::string speculative_method = "ngram";
  std::string draft_model;
  int ngram_min = 1, ngram_max = 4;

  // Checks the combination before any model is loaded; loads the draft model when one is named.
  void check() const;
  std::unique_ptr<model::Model> load_draft() const;
  // draft: the loaded draft model (or null).
  void apply(engine::EngineConfig& cfg, const model::Model* draft = nullptr) const;
};

void add_serving_flags(CLI::App* sub, ServingFlags& f);

// {"hits", "lookups", "hit_rate", "hit_tokens", "token_hit_rate", "cached_bytes", "cached_kv_blocks",
// "entries", "evictions", "budget_bytes", "block_tokens"}; null when prefix caching is off.
nlohmann::json prefix_cache_report(const engine::Engine& e);
// {"method", "num_tokens", "verify_chunks", "drafted", "accepted", "acceptance_rate", "rollbacks"};
// null when speculation is off.
nlohmann::json speculation_report(const engine::Engine& e);

}  // namespace parity::cli
