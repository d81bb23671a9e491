#pragma once
// The engine's serving features as every frontend takes them (the CLI's --enable-prefix-caching,
// --prefix-block-tokens, --prefix-cache-mb, --speculative-tokens, --speculative-method,
// --draft-model, --ngram-min/-max; docs/prefix-caching.md, docs/speculative-decoding.md):
// checked, the draft model loaded, applied to an engine configuration.
#include <memory>
#include <string>

#include "engine/engine.h"
#include "model/model.h"

namespace parity::frontends {

struct ServingOptions {
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

}  // namespace parity::frontends
