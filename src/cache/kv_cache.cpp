#include "cache/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/error.h"

namespace parity::cache {

std::size_t kv_bytes_per_token(int num_attention_layers, int num_kv_heads, int head_dim) {
  return 2 * std::size_t(num_attention_layers) * std::size_t(num_kv_heads) * std::size_t(head_dim) * sizeof(float);
}

KvCache::KvCache(int num_layers, const kernels::KvLayout& layout, int num_blocks, int num_slots, bool store_values,
                 int ranks)
    : layers_(num_layers), ranks_(ranks), layout_(layout), num_blocks_(num_blocks) {
  if (layout.block_size <= 0 || layout.block_size % kernels::kAttnKeyBlock != 0)
    throw Error("KV cache block size must be a positive multiple of " + std::to_string(kernels::kAttnKeyBlock) +
                ", not " + std::to_string(layout.block_size));
  if (num_layers < 1 || num_blocks < 1 || num_slots < 1 || layout.num_kv_heads < 1 || layout.head_dim < 1 ||
      ranks < 1)
    throw Error("KV cache needs at least one layer, block, slot, kv head, head dimension and rank");
  layer_floats_ = static_cast<std::size_t>(layout.block_floats()) * static_cast<std::size_t>(num_blocks);
  const std::size_t n = store_values ? layer_floats_ * static_cast<std::size_t>(num_layers) * std::size_t(ranks) : 0;
  k_.resize(n);
  v_.resize(n);
  // Zeroed so that every run starts from the same bytes; the kernel never reads a slot before
  // it is written.
  if (n) {
    std::memset(k_.data(), 0, n * sizeof(float));
    std::memset(v_.data(), 0, n * sizeof(float));
  }
  free_.reserve(static_cast<std::size_t>(num_blocks));
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);  // block 0 handed out first
  refs_.assign(static_cast<std::size_t>(num_blocks), 0);
  tables_.resize(static_cast<std::size_t>(num_slots));
}

int KvCache::blocks_for(int64_t tokens) const {
  return static_cast<int>((tokens + layout_.block_size - 1) / layout_.block_size);
}

bool KvCache::reserve(int slot, int64_t total_tokens) {
  if (slot < 0 || slot >= static_cast<int>(tables_.size()))
    throw Error("KV cache: slot " + std::to_string(slot) + " does not exist");
  std::vector<int>& t = tables_[static_cast<std::size_t>(slot)];
  const int need = blocks_for(total_tokens) - static_cast<int>(t.size());
  if (need <= 0) return true;
  if (need > static_cast<int>(free_.size())) return false;
  for (int i = 0; i < need; ++i) {
    t.push_back(free_.back());
    refs_[static_cast<std::size_t>(free_.back())] = 1;
    free_.pop_back();
  }
  return true;
}

void KvCache::release(int slot) { truncate(slot, 0); }

void KvCache::truncate(int slot, int64_t tokens) {
  std::vector<int>& t = tables_[static_cast<std::size_t>(slot)];
  const std::size_t keep = static_cast<std::size_t>(std::max(0, blocks_for(tokens)));
  // Reverse order: the slot's first block ends on top of the stack, so a sequence that comes
  // straight back gets the same blocks (not needed for the bits, which never depend on blocks).
  while (t.size() > keep) {
    drop(t.back());
    t.pop_back();
  }
}

void KvCache::clear_positions(int slot, int64_t from, int64_t to) {
  to = std::min(to, capacity(slot));
  if (from >= to || k_.size() == 0) return;
  const int n = static_cast<int>(to - from);
  const std::vector<float> zeros(static_cast<std::size_t>(n) * layout_.num_kv_heads * layout_.head_dim, 0.0f);
  for (int r = 0; r < ranks_; ++r)
    for (int l = 0; l < layers_; ++l)
      kernels::kv_write(layout_, k(l, r), v(l, r), block_table(slot), from, n, zeros.data(), zeros.data());
}

void KvCache::share(int slot, const std::vector<int>& blocks) {
  std::vector<int>& t = tables_[static_cast<std::size_t>(slot)];
  if (!t.empty()) throw Error("internal: KV blocks shared into a slot that already holds blocks");
  for (int b : blocks) {
    retain(b);
    t.push_back(b);
  }
}

std::vector<int> KvCache::blocks_of(int slot, int n) const {
  const std::vector<int>& t = tables_[static_cast<std::size_t>(slot)];
  if (n > static_cast<int>(t.size())) throw Error("internal: asked for more KV blocks than the slot holds");
  return std::vector<int>(t.begin(), t.begin() + n);
}

void KvCache::retain(int block) {
  int& r = refs_[static_cast<std::size_t>(block)];
  if (r < 1) throw Error("internal: KV block " + std::to_string(block) + " retained while free");
  ++r;
}

void KvCache::drop(int block) {
  int& r = refs_[static_cast<std::size_t>(block)];
  if (r < 1) throw Error("internal: KV block " + std::to_string(block) + " dropped while free");
  if (--r == 0) free_.push_back(block);
}

int64_t KvCache::capacity(int slot) const {
  return static_cast<int64_t>(tables_[static_cast<std::size_t>(slot)].size()) * layout_.block_size;
}

std::size_t KvCache::bytes_per_token() const {
  return kv_bytes_per_token(layers_, layout_.num_kv_heads * ranks_, layout_.head_dim);
}

}  // namespace parity::cache
