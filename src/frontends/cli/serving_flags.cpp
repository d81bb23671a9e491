#include "frontends/cli/serving_flags.h"

namespace parity::cli {

void add_serving_flags(CLI::App* sub, ServingFlags& f) {
  sub->add_flag("--enable-prefix-caching", f.prefix_caching,
                "reuse the cached state of a shared token prefix (docs/prefix-caching.md)");
  sub->add_option("--prefix-block-tokens", f.prefix_block_tokens,
                  "prefix caching: states are kept at multiples of this many prompt tokens (default 256; a "
                  "multiple of the KV block size, 16)")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--prefix-cache-mb", f.prefix_cache_mb,
                  "prefix caching: MiB for cached states (default: a quarter of --state-memory-mb, or room for "
                  "max(8, --max-num-seqs) sequences' states)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--speculative-tokens", f.speculative_tokens,
                  "speculative decoding: draft tokens verified per step (0 = off; docs/speculative-decoding.md)")
      ->check(CLI::Range(0, 64));
  sub->add_option("--speculative-method", f.speculative_method, "ngram (prompt lookup) | draft (--draft-model)")
      ->check(CLI::IsMember({"ngram", "draft"}));
  sub->add_option("--draft-model", f.draft_model, "speculative decoding: the draft model (checkpoint folder or builtin:NAME)");
  sub->add_option("--ngram-min", f.ngram_min, "prompt lookup: shortest n-gram tried (default 1)")->check(CLI::Range(1, 64));
  sub->add_option("--ngram-max", f.ngram_max, "prompt lookup: longest n-gram tried (default 4)")->check(CLI::Range(1, 64));
}

nlohmann::json speculation_report(const engine::Engine& e) {
  const engine::SpeculativeConfig& c = e.config().speculative;
  if (c.num_tokens == 0) return nullptr;
  const engine::SpeculationStats& s = e.speculation_stats();
  const char* method = c.method == engine::SpeculativeMethod::DraftModel ? "draft"
                       : c.method == engine::SpeculativeMethod::Custom   ? "custom"
                                                                         : "ngram";
  return {{"method", method},
          {"num_tokens", c.num_tokens},
          {"verify_chunks", s.verify_chunks},
          {"drafted", s.drafted},
          {"accepted", s.accepted},
          {"acceptance_rate", s.acceptance_rate()},
          {"rollbacks", s.rollbacks}};
}

nlohmann::json prefix_cache_report(const engine::Engine& e) {
  const cache::PrefixCache* p = e.prefix_cache();
  if (!p) return nullptr;
  const cache::PrefixCacheStats& s = p->stats();
  return {{"hits", s.hits},
          {"lookups", s.lookups},
          {"hit_rate", s.hit_rate()},
          {"hit_tokens", s.hit_tokens},
          {"token_hit_rate", s.token_hit_rate()},
          {"cached_bytes", s.state_bytes},
          {"cached_kv_blocks", s.kv_blocks},
          {"entries", s.entries},
          {"evictions", s.evictions},
          {"budget_bytes", p->budget_bytes()},
          {"block_tokens", p->block_tokens()}};
}

}  // namespace parity::cli
