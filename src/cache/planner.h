#pragma once
// Sizes the model cache from a memory budget: the bytes one sequence's state needs (conv state,
// SSM state, replay rows of the Mamba layers), the bytes one token's K and V need (attention
// layers), how many sequences and how many KV blocks fit.
#include <cstddef>
#include <cstdint>
#include <string>

#include "cache/mamba_state_cache.h"
#include "cache/model_cache.h"

namespace parity::cache {

// Without a budget, each sequence slot gets KV room for this many tokens (or max_model_len if
// shorter); a longer request then needs --state-memory-mb.
inline constexpr int64_t kDefaultKvTokensPerSeq = 4096;

struct CachePlan {
  SlotBytes per_seq;                 // Mamba state of one sequence
  std::size_t kv_per_token = 0;      // K + V of one token, every attention layer
  int kv_block_size = 16;
  int num_slots = 0;
  int kv_num_blocks = 0;             // 0 without attention layers
  std::size_t prefix_cache_bytes = 0;  // Mamba state images of the prefix cache (0: caching off)
  std::size_t kv_bytes() const { return kv_per_token * std::size_t(kv_block_size) * std::size_t(kv_num_blocks); }
  int64_t kv_tokens() const { return int64_t(kv_block_size) * kv_num_blocks; }
  std::size_t total_bytes() const {
    return per_seq.total() * static_cast<std::size_t>(num_slots) + kv_bytes() + prefix_cache_bytes;
  }
  ModelCacheOptions options(const MambaCacheOptions& mamba) const;
  std::string describe() const;  // one human-readable block, for stderr
};

// Prefix caching's share of the memory: `bytes` when given; otherwise a quarter of the budget, or
// without a budget room for max(8, max_num_seqs) sequences' states. Its KV blocks come from the
// KV pool (they are shared with the sequences that use them).
struct PrefixCacheBudget {
  bool enabled = false;
  std::size_t bytes = 0;
};

// budget_bytes == 0: max_num_seqs slots, and KV blocks for min(max_model_len,
// kDefaultKvTokensPerSeq) tokens per slot. Otherwise slots = min(max_num_seqs, what fits when
// each also gets one KV block), and the rest of the budget goes to KV blocks. A budget below one
// sequence (state + one block) is an error that says how much one needs.
// With prefix caching, its share comes off the budget first.
CachePlan plan_cache(const ModelCacheSpec& spec, const MambaCacheOptions& opt, std::size_t budget_bytes,
                     int max_num_seqs, int64_t max_model_len = kDefaultKvTokensPerSeq, int kv_block_size = 16,
                     PrefixCacheBudget prefix = {});

// Mamba-only models (kept for callers that have just a Mamba2 config).
CachePlan plan_cache(const io::Mamba2Config& cfg, int num_mamba_layers, const MambaCacheOptions& opt,
                     std::size_t budget_bytes, int max_num_seqs);

}  // namespace parity::cache
