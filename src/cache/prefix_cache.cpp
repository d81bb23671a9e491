#include "cache/prefix_cache.h"

#include <algorithm>
#include <string>

#include <xxhash.h>

#include "common/error.h"

namespace parity::cache {

PrefixCache::PrefixCache(ModelCache& cache, const Numerics& numerics, std::size_t budget_bytes, int block_tokens)
    : cache_(cache), budget_(budget_bytes), block_(block_tokens) {
  if (block_tokens < 1) throw Error("prefix caching: the block size must be at least 1 token");
  if (const KvCache* kv = cache.kv(); kv && block_tokens % kv->layout().block_size != 0)
    throw Error("prefix caching: the block size (" + std::to_string(block_tokens) +
                " tokens) must be a multiple of the KV block size (" + std::to_string(kv->layout().block_size) +
                ") so that cached prefixes end on whole KV blocks");
  std::string id;
  for (const auto& [k, v] : numerics.metadata()) id += k + "=" + v + ";";
  numerics_hash_ = XXH3_64bits(id.data(), id.size());
}

uint64_t PrefixCache::seed(uint64_t identity) const {
  const uint64_t parts[2] = {numerics_hash_, identity};
  return XXH3_64bits(parts, sizeof parts);
}

uint64_t PrefixCache::prefix_key(const std::vector<int32_t>& tokens, int64_t n_blocks, uint64_t identity) const {
  uint64_t h = seed(identity);
  for (int64_t b = 0; b < n_blocks; ++b)
    h = XXH3_64bits_withSeed(tokens.data() + b * block_, std::size_t(block_) * sizeof(int32_t), h);
  return h;
}

PrefixHit PrefixCache::acquire(int slot, const std::vector<int32_t>& tokens, int64_t max_len, uint64_t identity) {
  max_len = std::min<int64_t>(max_len, static_cast<int64_t>(tokens.size()));
  ++stats_.lookups;
  stats_.lookup_tokens += static_cast<uint64_t>(std::max<int64_t>(0, max_len));
  const int64_t nb = max_len / block_;
  if (nb < 1 || entries_.empty()) return {};
  std::vector<uint64_t> keys(static_cast<std::size_t>(nb));
  uint64_t h = seed(identity);
  for (int64_t b = 0; b < nb; ++b) {
    h = XXH3_64bits_withSeed(tokens.data() + b * block_, std::size_t(block_) * sizeof(int32_t), h);
    keys[static_cast<std::size_t>(b)] = h;
  }
  for (int64_t b = nb; b >= 1; --b) {
    auto it = entries_.find(keys[static_cast<std::size_t>(b - 1)]);
    if (it == entries_.end()) continue;
    Entry& e = it->second;
    const int64_t len = b * block_;
    if (e.identity != identity || static_cast<int64_t>(e.tokens.size()) != len ||
        !std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin()))
      continue;  // a hash collision
    // The hit and the shorter prefixes on its path are all in use now.
    ++clock_;
    for (int64_t c = 1; c <= b; ++c)
      if (auto p = entries_.find(keys[static_cast<std::size_t>(c - 1)]); p != entries_.end()) p->second.last_use = clock_;
    if (KvCache* kv = cache_.kv()) kv->share(slot, e.kv_blocks);
    cache_.load_state(slot, e.image);
    ++stats_.hits;
    stats_.hit_tokens += static_cast<uint64_t>(len);
    return {len, e.source};
  }
  return {};
}

void PrefixCache::insert(int slot, const std::vector<int32_t>& tokens, uint64_t identity, uint64_t source) {
  const int64_t len = cache_.position(slot);
  if (len < 1 || len % block_ != 0 || len > static_cast<int64_t>(tokens.size()))
    throw Error("internal: prefix cache insert at position " + std::to_string(len));
  const uint64_t key = prefix_key(tokens, len / block_, identity);
  if (auto it = entries_.find(key); it != entries_.end()) {
    it->second.last_use = ++clock_;  // cached already (or a colliding prefix, which stays)
    return;
  }
  Entry e;
  cache_.save_state(slot, e.image);
  if (e.image.bytes() > budget_) return;
  e.tokens.assign(tokens.begin(), tokens.begin() + len);
  e.identity = identity;
  e.source = source;
  e.last_use = ++clock_;
  if (KvCache* kv = cache_.kv()) {
    e.kv_blocks = kv->blocks_of(slot, kv->blocks_for(len));
    for (int b : e.kv_blocks) kv->retain(b);
  }
  stats_.state_bytes += e.image.bytes();
  stats_.kv_blocks += static_cast<int>(e.kv_blocks.size());
  ++stats_.inserts;
  entries_.emplace(key, std::move(e));
  stats_.entries = static_cast<int>(entries_.size());
  while (stats_.state_bytes > budget_ && evict_lru(false)) {
  }
}

void PrefixCache::evict(std::unordered_map<uint64_t, Entry>::iterator it) {
  if (KvCache* kv = cache_.kv())
    for (int b : it->second.kv_blocks) kv->drop(b);
  stats_.state_bytes -= it->second.image.bytes();
  stats_.kv_blocks -= static_cast<int>(it->second.kv_blocks.size());
  ++stats_.evictions;
  entries_.erase(it);
  stats_.entries = static_cast<int>(entries_.size());
}

bool PrefixCache::evict_lru(bool kv_only) {
  auto victim = entries_.end();
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (kv_only && it->second.kv_blocks.empty()) continue;
    if (victim == entries_.end() || it->second.last_use < victim->second.last_use) victim = it;
  }
  if (victim == entries_.end()) return false;
  evict(victim);
  return true;
}

bool PrefixCache::evict_for_kv(int blocks) {
  const KvCache* kv = cache_.kv();
  if (!kv) return false;
  bool any = false;
  while (kv->num_free_blocks() < blocks && evict_lru(true)) any = true;
  return any;
}

void PrefixCache::clear() {
  while (!entries_.empty()) evict(entries_.begin());
}

}  // namespace parity::cache
