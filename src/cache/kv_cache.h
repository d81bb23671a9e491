#pragma once
// Paged key/value memory of every attention layer: a pool of physical blocks of `block_size`
// token slots (layout of kernels/attention.h), a free list, and one block table per sequence
// slot that grows as the sequence does. A physical block id means the same block in every
// attention layer, so one table serves them all.
//
// Under tensor parallelism each rank keeps the K and V of its KV heads (layout: one rank's heads),
// addressed through the one set of block tables.
//
// Blocks are reference-counted so that the prefix cache can share them: a full block below a
// cached prefix length is never written again (a pass writes only its own positions), so several
// sequences and the prefix cache may hold it; it returns to the free list when the last holder
// lets go.
#include <cstdint>
#include <vector>

#include "common/aligned.h"
#include "kernels/attention.h"

namespace parity::cache {

class KvCache {
 public:
  // layout.block_size must be a positive multiple of kernels::kAttnKeyBlock. store_values = false:
  // blocks and tables only (a model that keeps K and V in device memory uses them to address its
  // own arrays); k() and v() are then null. ranks: tensor-parallel ranks, each with its own K and V
  // of layout's shape.
  KvCache(int num_layers, const kernels::KvLayout& layout, int num_blocks, int num_slots, bool store_values = true,
          int ranks = 1);

  const kernels::KvLayout& layout() const { return layout_; }
  int num_layers() const { return layers_; }
  int num_blocks() const { return num_blocks_; }
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  int blocks_for(int64_t tokens) const;

  // Makes room for positions [0, total_tokens) of the slot, taking blocks from the free list.
  // false (and nothing taken) when there are not enough free blocks.
  bool reserve(int slot, int64_t total_tokens);
  void release(int slot);  // the slot lets go of every block (a block nobody holds is free again)
  // Keeps the first blocks_for(tokens) blocks of the slot and lets go of the others (the
  // speculative rollback: blocks only rejected rows used).
  void truncate(int slot, int64_t tokens);
  // Zeroes the K and V of positions [from, to) of the slot in every layer (the positions it holds;
  // the speculative rollback: rejected rows leave nothing behind).
  void clear_positions(int slot, int64_t from, int64_t to);
  // Starts an empty slot's table with `blocks` (a prefix-cache hit); each gains a holder.
  void share(int slot, const std::vector<int>& blocks);
  // The first n block ids of the slot's table.
  std::vector<int> blocks_of(int slot, int n) const;
  // Holders other than slots (the prefix cache): retain adds one, drop removes one.
  void retain(int block);
  void drop(int block);
  int holders(int block) const { return refs_[static_cast<std::size_t>(block)]; }
  int64_t capacity(int slot) const;  // tokens the slot's blocks hold
  const int* block_table(int slot) const { return tables_[static_cast<std::size_t>(slot)].data(); }

  float* k(int layer, int rank = 0) { return k_.size() ? k_.data() + value_offset(layer, rank) : nullptr; }
  float* v(int layer, int rank = 0) { return v_.size() ? v_.data() + value_offset(layer, rank) : nullptr; }
  int ranks() const { return ranks_; }

  // K and V of one token in every attention layer (every rank).
  std::size_t bytes_per_token() const;

 private:
  int layers_;
  int ranks_;
  kernels::KvLayout layout_;
  int num_blocks_;
  std::size_t layer_floats_;
  AlignedBuffer<float> k_, v_;
  std::vector<int> free_;  // a stack: the most recently freed block is reused first
  std::vector<int> refs_;  // holders per block (0: on the free list)
  std::vector<std::vector<int>> tables_;

  std::size_t value_offset(int layer, int rank) const {
    return (static_cast<std::size_t>(rank) * static_cast<std::size_t>(layers_) + static_cast<std::size_t>(layer)) *
           layer_floats_;
  }
};

std::size_t kv_bytes_per_token(int num_attention_layers, int num_kv_heads, int head_dim);

}  // namespace parity::cache
