#include "cache/model_cache.h"

#include <algorithm>
#include <string>

#include "cache/rank_shape.h"
#include "common/error.h"

namespace parity::cache {

ModelCache::ModelCache(const ModelCacheSpec& spec, const ModelCacheOptions& opt) : spec_(spec), opt_(opt) {
  validate(opt_.mamba);
  const int tp = spec.tensor_parallel;
  if (tp < 1) throw Error("tensor parallel size must be at least 1, not " + std::to_string(tp));
  if (spec.num_mamba_layers > 0 && !spec.state_on_device) {
    const io::Mamba2Config rank_cfg = tp > 1 ? rank_mamba_config(spec.mamba, tp) : spec.mamba;
    for (int r = 0; r < tp; ++r) {
      MambaCacheOptions o = opt.mamba;
      if (tp > 1) o.grid = rank_grid(o.grid, spec.mamba, r, tp);
      mamba_.push_back(std::make_unique<MambaStateCache>(rank_cfg, spec.num_mamba_layers, o));
    }
  }
  if (spec.num_attention_layers > 0) {
    if (opt.kv_num_blocks < 1) throw Error("the model has attention layers: its KV cache needs at least one block");
    if (spec.num_kv_heads % tp != 0)
      throw Error("tensor parallel size " + std::to_string(tp) + " does not divide the attention's " +
                  std::to_string(spec.num_kv_heads) + " KV heads");
    kernels::KvLayout layout{spec.num_kv_heads / tp, spec.head_dim, opt.kv_block_size};
    // A model that keeps its state on the device keeps K and V there too: the host holds the tables.
    kv_ = std::make_unique<KvCache>(spec.num_attention_layers, layout, opt.kv_num_blocks, opt.mamba.num_slots,
                                    !spec.state_on_device, tp);
  }
  used_.assign(static_cast<std::size_t>(opt.mamba.num_slots), 0);
  pos_.assign(static_cast<std::size_t>(opt.mamba.num_slots), 0);
}

int ModelCache::num_free() const {
  int n = 0;
  for (uint8_t u : used_) n += u == 0;
  return n;
}

int ModelCache::allocate() {
  int slot = -1;
  if (!mamba_.empty()) {
    // The Mamba cache zeroes the slot it hands out; its id becomes the sequence's id everywhere. The
    // ranks' caches see the same calls, so they hand out the same slot.
    slot = mamba_[0]->allocate();
    for (std::size_t r = 1; r < mamba_.size(); ++r)
      if (mamba_[r]->allocate() != slot) throw Error("internal: tensor-parallel ranks' state slots diverged");
  } else {
    for (std::size_t i = 0; i < used_.size(); ++i)
      if (!used_[i]) {
        slot = static_cast<int>(i);
        break;
      }
  }
  if (slot < 0) return -1;
  used_[static_cast<std::size_t>(slot)] = 1;
  pos_[static_cast<std::size_t>(slot)] = 0;
  return slot;
}

void ModelCache::release(int slot) {
  if (!in_use(slot)) return;
  for (auto& m : mamba_) m->release(slot);
  if (kv_) kv_->release(slot);
  used_[static_cast<std::size_t>(slot)] = 0;
}

bool ModelCache::reserve(int slot, int64_t total_tokens) {
  if (!in_use(slot)) throw Error("cache: slot " + std::to_string(slot) + " is not allocated");
  return kv_ ? kv_->reserve(slot, total_tokens) : true;
}

void ModelCache::set_position(int slot, int64_t p) {
  pos_[static_cast<std::size_t>(slot)] = p;
  for (auto& m : mamba_) m->set_position(slot, p);
}

// The image's vectors keep their capacity from one save to the next (the speculative rollback
// saves every step).
static void check_host_state(const ModelCacheSpec& spec) {
  if (spec.num_mamba_layers > 0 && spec.state_on_device)
    throw Error("prefix caching and speculative decoding copy the Mamba state on the host; this model keeps its "
                "state on the device, which they do not support yet");
}

void ModelCache::save_state(int slot, MambaSlotImage& img) const {
  check_host_state(spec_);
  if (mamba_.empty()) img = MambaSlotImage{};
  img.ranks.resize(mamba_.empty() ? 0 : mamba_.size() - 1);
  for (std::size_t r = 0; r < mamba_.size(); ++r) mamba_[r]->save(slot, r == 0 ? img : img.ranks[r - 1]);
  img.position = position(slot);
}

void ModelCache::save_for_call(int slot, int64_t from, int64_t to, MambaSlotImage& img) const {
  check_host_state(spec_);
  if (mamba_.empty()) img = MambaSlotImage{};
  img.ranks.resize(mamba_.empty() ? 0 : mamba_.size() - 1);
  for (std::size_t r = 0; r < mamba_.size(); ++r)
    mamba_[r]->save_for_call(slot, from, to, r == 0 ? img : img.ranks[r - 1]);
  img.position = position(slot);
}

void ModelCache::load_state(int slot, const MambaSlotImage& img) {
  check_host_state(spec_);
  if (!in_use(slot)) throw Error("internal: state image loaded into a free slot");
  if (!mamba_.empty() && img.ranks.size() != mamba_.size() - 1)
    throw Error("internal: state image made for another tensor parallel size");
  for (std::size_t r = 0; r < mamba_.size(); ++r) mamba_[r]->load(slot, r == 0 ? img : img.ranks[r - 1]);
  set_position(slot, img.position);
}

ModelCache make_single_cache(const ModelCacheSpec& spec, int64_t tokens, const Numerics& numerics) {
  ModelCacheOptions o;
  o.mamba.num_slots = 1;
  o.mamba.exact = numerics.exact;
  o.mamba.grid = numerics.grid;
  // One call holds every row: plain mode's state is never stored between rows, so its dtype
  // cannot matter; exact mode rounds at its boundaries in the dtype asked for.
  o.mamba.ssm_dtype = numerics.exact ? numerics.ssm_dtype : DType::F32;
  o.kv_num_blocks = static_cast<int>(std::max<int64_t>(1, (tokens + o.kv_block_size - 1) / o.kv_block_size));
  return ModelCache(spec, o);
}

}  // namespace parity::cache
