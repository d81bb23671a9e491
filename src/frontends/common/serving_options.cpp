#include "frontends/common/serving_options.h"

#include "common/error.h"
#include "model/checkpoint.h"

namespace parity::frontends {

void ServingOptions::check() const {
  if (speculative_method == "draft" && draft_model.empty() && speculative_tokens > 0)
    throw Error("--speculative-method draft needs --draft-model");
  if (!draft_model.empty() && speculative_method != "draft")
    throw Error("--draft-model is used by --speculative-method draft only");
  if (!draft_model.empty() && speculative_tokens == 0)
    throw Error("--draft-model needs --speculative-tokens K (K >= 1)");
  if (ngram_min > ngram_max)
    throw Error("--ngram-min (" + std::to_string(ngram_min) + ") is larger than --ngram-max (" +
                std::to_string(ngram_max) + ")");
}

std::unique_ptr<model::Model> ServingOptions::load_draft() const {
  if (draft_model.empty()) return nullptr;
  return model::load_model(model::open_checkpoint(draft_model));
}

void ServingOptions::apply(engine::EngineConfig& cfg, const model::Model* draft) const {
  cfg.enable_prefix_caching = prefix_caching;
  cfg.prefix_block_tokens = prefix_block_tokens;
  cfg.prefix_cache_bytes = static_cast<std::size_t>(prefix_cache_mb * 1024.0 * 1024.0);
  cfg.speculative.num_tokens = speculative_tokens;
  cfg.speculative.method =
      speculative_method == "draft" ? engine::SpeculativeMethod::DraftModel : engine::SpeculativeMethod::Ngram;
  cfg.speculative.ngram_min = ngram_min;
  cfg.speculative.ngram_max = ngram_max;
  cfg.speculative.draft_model = draft;
}

}  // namespace parity::frontends
