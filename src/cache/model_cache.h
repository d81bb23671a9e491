#pragma once
// Everything a model keeps per sequence, under one slot id: the Mamba state (conv, SSM, exact
// replay rows) of its Mamba layers, indexed by Mamba-layer ordinal, and the paged KV blocks of
// its attention layers. Either part is absent when the model has no layer of that kind.
#include <cstdint>
#include <memory>
#include <vector>

#include "cache/kv_cache.h"
#include "cache/mamba_state_cache.h"
#include "cache/numerics.h"
#include "io/hf_config.h"

namespace parity::cache {

// What a model needs from the cache (model::Model::cache_spec()).
struct ModelCacheSpec {
  int num_mamba_layers = 0;
  io::Mamba2Config mamba;  // the Mamba mixer shape; meaningful when num_mamba_layers > 0
  int num_attention_layers = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int chunk_size = 256;  // the Mamba chunk size (plain mode's SSD grid)
  // The model keeps its Mamba state in its own (device) memory: the cache then holds only slots,
  // positions and KV blocks, and backend_state() carries the device buffers.
  bool state_on_device = false;
  // Tensor-parallel ranks (docs/tensor-parallel.md). Each keeps the state of its 1/tp of every Mamba
  // mixer's heads (cache/rank_shape.h) and the K/V of its 1/tp of the KV heads; slots, positions and
  // block tables are one set for all of them. The fields above describe the whole model: the bytes
  // of all ranks together are the bytes of one rank holding everything, so the planner needs no
  // change. With state_on_device each rank keeps its part in its own device memory (backend_state()).
  int tensor_parallel = 1;
};

struct ModelCacheOptions {
  MambaCacheOptions mamba;  // num_slots, SSM dtype, exact
  int kv_block_size = 16;
  int kv_num_blocks = 0;    // must be >= 1 when the model has attention layers
};

class ModelCache {
 public:
  ModelCache(const ModelCacheSpec& spec, const ModelCacheOptions& opt);

  const ModelCacheSpec& spec() const { return spec_; }
  const ModelCacheOptions& options() const { return opt_; }
  bool exact() const { return opt_.mamba.exact; }
  int num_slots() const { return opt_.mamba.num_slots; }
  int num_free() const;

  // A free slot, zeroed state and no KV blocks; -1 when none is free.
  int allocate();
  void release(int slot);
  bool in_use(int slot) const { return slot >= 0 && slot < num_slots() && used_[static_cast<std::size_t>(slot)]; }

  // KV blocks for positions [0, total_tokens) (true without attention layers).
  bool reserve(int slot, int64_t total_tokens);

  // Next position the slot expects; the model checks it and advances it after a pass.
  int64_t position(int slot) const { return pos_[static_cast<std::size_t>(slot)]; }
  void set_position(int slot, int64_t p);

  // The slot's Mamba state (conv, SSM, replay ring): whole (save_state) or what a call over
  // [from, to) can change (save_for_call); load_state writes it back and sets the slot's
  // position to the image's. Models without Mamba layers keep only the position; a model that
  // keeps its state on the device (state_on_device) is refused (parity::Error).
  void save_state(int slot, MambaSlotImage& img) const;
  void save_for_call(int slot, int64_t from, int64_t to, MambaSlotImage& img) const;
  void load_state(int slot, const MambaSlotImage& img);

  // null without Mamba layers or with state_on_device; `rank`: a tensor-parallel rank's part
  MambaStateCache* mamba(int rank = 0) { return mamba_.empty() ? nullptr : mamba_[std::size_t(rank)].get(); }
  const MambaStateCache* mamba(int rank = 0) const {
    return mamba_.empty() ? nullptr : mamba_[std::size_t(rank)].get();
  }
  // A backend's per-cache state (the CUDA backend's device buffers), freed with the cache.
  std::shared_ptr<void>& backend_state() { return backend_state_; }
  KvCache* kv() { return kv_.get(); }                // null without attention layers
  const KvCache* kv() const { return kv_.get(); }

 private:
  ModelCacheSpec spec_;
  ModelCacheOptions opt_;
  std::shared_ptr<void> backend_state_;
  std::vector<std::unique_ptr<MambaStateCache>> mamba_;  // one per tensor-parallel rank
  std::unique_ptr<KvCache> kv_;
  std::vector<uint8_t> used_;
  std::vector<int64_t> pos_;
};

// A one-sequence cache that holds `tokens` positions (single-shot scoring, tests).
ModelCache make_single_cache(const ModelCacheSpec& spec, int64_t tokens, const Numerics& numerics);

}  // namespace parity::cache
