#pragma once
// Prefix caching: requests that share a token prefix reuse its state instead of recomputing it.
//
// An entry is the state of a sequence after the first L tokens of a stream, L a multiple of
// `block_tokens`: the slot's whole Mamba state (conv state, SSM state — in exact mode each head's
// boundary state at its last boundary <= L of the staggered grid — and the replay ring, which
// holds the rows of every head's current cell) and, for attention layers, the L / kv_block_size
// full KV blocks, shared by reference count with every sequence that uses them (a pass writes
// only its own positions, so a full block below L never changes). Loading an entry into a fresh
// slot gives it the bytes a sequence has after computing those L tokens.
//
// Keys are chained block hashes as in vLLM: h_0 = the identity seed, h_i = XXH3(tokens of block
// i, seed h_{i-1}), so h_k names the whole prefix of k blocks. The identity seed mixes the
// numerics identity (Numerics::metadata: mode, grid, stagger, state dtype) with a caller-given
// value (the engine's: the probe hooks' identity for the request, e.g. which tensor replacement
// it runs under), so states made under another identity never match. A hit is verified against
// the stored tokens (a hash collision is a miss).
//
// Memory: the Mamba images count against `budget_bytes` (least recently used entries go first);
// the KV blocks an entry holds come from the shared KV pool, and the engine evicts entries
// (evict_for_kv) before it preempts a request for KV room.
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "cache/mamba_state_cache.h"
#include "cache/model_cache.h"
#include "cache/numerics.h"

namespace parity::cache {

struct PrefixCacheStats {
  uint64_t lookups = 0;        // requests that asked (admissions with caching on)
  uint64_t hits = 0;           // of them, those that reused a prefix
  uint64_t lookup_tokens = 0;  // tokens they could have reused at most (stream length - 1 each)
  uint64_t hit_tokens = 0;     // tokens served from the cache
  uint64_t inserts = 0, evictions = 0;
  std::size_t state_bytes = 0;  // Mamba images held now
  int kv_blocks = 0;            // KV blocks held now (shared with running sequences)
  int entries = 0;
  double hit_rate() const { return lookups ? double(hits) / double(lookups) : 0.0; }
  double token_hit_rate() const { return lookup_tokens ? double(hit_tokens) / double(lookup_tokens) : 0.0; }
};

struct PrefixHit {
  int64_t length = 0;   // tokens restored (0: a miss)
  uint64_t source = 0;  // the request whose computation made the entry
};

class PrefixCache {
 public:
  // block_tokens >= 1 and, for a model with attention layers, a multiple of the KV block size.
  PrefixCache(ModelCache& cache, const Numerics& numerics, std::size_t budget_bytes, int block_tokens);

  int block_tokens() const { return block_; }
  std::size_t budget_bytes() const { return budget_; }
  const PrefixCacheStats& stats() const { return stats_; }

  // The longest cached prefix of tokens[0, max_len) made under `identity`; on a hit it is loaded
  // into `slot` (fresh: position 0, no KV blocks), whose position becomes the prefix length.
  PrefixHit acquire(int slot, const std::vector<int32_t>& tokens, int64_t max_len, uint64_t identity);
  // Stores the slot's state under tokens[0, position of the slot) (position: a positive multiple
  // of block_tokens) unless that prefix is cached already. Drops least recently used entries to
  // stay within the budget; an image larger than the whole budget is not stored.
  void insert(int slot, const std::vector<int32_t>& tokens, uint64_t identity, uint64_t source);
  // Drops least recently used entries that hold KV blocks until `blocks` blocks are free; false
  // when none is left to drop.
  bool evict_for_kv(int blocks);
  void clear();

  // Chained hash of the first n_blocks blocks (tests, the key's definition).
  uint64_t prefix_key(const std::vector<int32_t>& tokens, int64_t n_blocks, uint64_t identity) const;

 private:
  struct Entry {
    std::vector<int32_t> tokens;  // the prefix itself, to verify a hit
    uint64_t identity = 0;
    MambaSlotImage image;
    std::vector<int> kv_blocks;
    uint64_t source = 0;
    uint64_t last_use = 0;
  };
  uint64_t seed(uint64_t identity) const;
  void evict(std::unordered_map<uint64_t, Entry>::iterator it);
  bool evict_lru(bool kv_only);

  ModelCache& cache_;
  uint64_t numerics_hash_;
  std::size_t budget_;
  int block_;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, Entry> entries_;
  PrefixCacheStats stats_;
};

}  // namespace parity::cache
