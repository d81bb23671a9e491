#include "cache/mamba_state_cache.h"

#include <algorithm>
#include <cstring>

#include "cache/numerics.h"
#include "common/error.h"

namespace parity::cache {

kernels::SsdShape ssd_shape(const io::Mamba2Config& cfg) {
  return {cfg.num_heads, cfg.head_dim, cfg.n_groups, cfg.state_size, cfg.chunk_size};
}

}  // namespace parity::cache

namespace parity::cache {

SlotBytes slot_bytes(const io::Mamba2Config& cfg, int num_mamba_layers, const MambaCacheOptions& opt) {
  SlotBytes b;
  const std::size_t L = static_cast<std::size_t>(num_mamba_layers);
  b.conv = L * std::size_t(cfg.conv_kernel - 1) * cfg.conv_dim() * sizeof(float);
  b.ssm = L * std::size_t(cfg.num_heads) * cfg.head_dim * cfg.state_size * dtype_size(opt.ssm_dtype);
  if (opt.exact) {
    const kernels::RingSizes r = kernels::ring_sizes(ssd_shape(cfg), opt.grid);
    b.replay = L * std::size_t(r.x + r.dt + r.B) * sizeof(float);
  }
  return b;
}

void validate(const MambaCacheOptions& opt) {
  if (opt.ssm_dtype != DType::F32 && opt.ssm_dtype != DType::BF16)
    throw Error("mamba SSM cache dtype must be float32 or bfloat16");
  if (opt.exact) validate_exact_cell(opt.grid.cell);
  if (opt.num_slots < 1) throw Error("the state cache needs at least one slot");
}

MambaStateCache::MambaStateCache(const io::Mamba2Config& cfg, int num_mamba_layers, const MambaCacheOptions& opt)
    : cfg_(cfg), layers_(num_mamba_layers), opt_(opt) {
  opt_.grid.nheads = cfg.num_heads;
  validate(opt_);
  bytes_ = slot_bytes(cfg, num_mamba_layers, opt_);
  conv_elems_ = std::size_t(cfg.conv_kernel - 1) * cfg.conv_dim();
  ssm_elems_ = std::size_t(cfg.num_heads) * cfg.head_dim * cfg.state_size;
  if (opt_.exact) ring_ = kernels::ring_sizes(ssd_shape(cfg), opt_.grid);
  const std::size_t ls = std::size_t(layers_) * opt.num_slots;
  conv_.resize(ls * conv_elems_);
  if (opt.ssm_dtype == DType::F32) ssm_f32_.resize(ls * ssm_elems_);
  else ssm_bf16_.resize(ls * ssm_elems_);
  rx_.resize(ls * std::size_t(ring_.x));
  rdt_.resize(ls * std::size_t(ring_.dt));
  rb_.resize(ls * std::size_t(ring_.B));
  // Zeroed once: a slot's replay rows are always written before they are read,
  // but uninitialised memory could hold NaNs or subnormals that make a benchmark (which positions
  // slots directly) crawl, and zeros make every run start from the same bytes.
  for (AlignedBuffer<float>* b : {&conv_, &ssm_f32_, &rx_, &rdt_, &rb_})
    if (b->size()) std::memset(b->data(), 0, b->size() * sizeof(float));
  if (ssm_bf16_.size()) std::memset(ssm_bf16_.data(), 0, ssm_bf16_.size() * sizeof(uint16_t));
  used_.assign(opt.num_slots, 0);
  pos_.assign(opt.num_slots, 0);
}

int MambaStateCache::num_free() const {
  return static_cast<int>(std::count(used_.begin(), used_.end(), uint8_t{0}));
}

int MambaStateCache::allocate() {
  for (int s = 0; s < opt_.num_slots; ++s) {
    if (used_[s]) continue;
    used_[s] = 1;
    pos_[s] = 0;
    for (int l = 0; l < layers_; ++l) {
      std::memset(conv_state(l, s), 0, conv_elems_ * sizeof(float));
      std::size_t off = (std::size_t(l) * opt_.num_slots + s) * ssm_elems_;
      if (opt_.ssm_dtype == DType::F32) std::memset(ssm_f32_.data() + off, 0, ssm_elems_ * sizeof(float));
      else std::memset(ssm_bf16_.data() + off, 0, ssm_elems_ * sizeof(uint16_t));
    }
    return s;
  }
  return -1;
}

void MambaStateCache::release(int slot) {
  if (slot < 0 || slot >= opt_.num_slots || !used_[slot]) throw Error("release of a state slot that is not in use");
  used_[slot] = 0;
}

float* MambaStateCache::conv_state(int layer, int slot) {
  return conv_.data() + (std::size_t(layer) * opt_.num_slots + slot) * conv_elems_;
}

float* MambaStateCache::ssm_f32(int layer, int slot) {
  if (opt_.ssm_dtype != DType::F32) throw Error("internal: direct SSM state access needs a float32 cache");
  return ssm_f32_.data() + (std::size_t(layer) * opt_.num_slots + slot) * ssm_elems_;
}

uint16_t* MambaStateCache::ssm_bf16(int layer, int slot) {
  if (opt_.ssm_dtype != DType::BF16) throw Error("internal: direct bf16 SSM state access needs a bfloat16 cache");
  return ssm_bf16_.data() + (std::size_t(layer) * opt_.num_slots + slot) * ssm_elems_;
}

void MambaStateCache::load_ssm(int layer, int slot, float* dst) const {
  std::size_t off = (std::size_t(layer) * opt_.num_slots + slot) * ssm_elems_;
  if (opt_.ssm_dtype == DType::F32) {
    std::memcpy(dst, ssm_f32_.data() + off, ssm_elems_ * sizeof(float));
  } else {
    const uint16_t* src = ssm_bf16_.data() + off;
    for (std::size_t i = 0; i < ssm_elems_; ++i) dst[i] = bf16_to_f32(src[i]);
  }
}

void MambaStateCache::store_ssm(int layer, int slot, const float* src) {
  std::size_t off = (std::size_t(layer) * opt_.num_slots + slot) * ssm_elems_;
  if (opt_.ssm_dtype == DType::F32) {
    std::memcpy(ssm_f32_.data() + off, src, ssm_elems_ * sizeof(float));
  } else {
    uint16_t* dst = ssm_bf16_.data() + off;
    for (std::size_t i = 0; i < ssm_elems_; ++i) dst[i] = f32_to_bf16(src[i]);
  }
}

kernels::GridState MambaStateCache::grid_state(int layer, int slot) {
  if (!opt_.exact) throw Error("internal: boundary states exist in exact mode only");
  kernels::GridState st;
  if (opt_.ssm_dtype == DType::F32) st.f32 = ssm_f32(layer, slot);
  else st.bf16 = ssm_bf16(layer, slot);
  return st;
}

kernels::ReplayRing MambaStateCache::ring(int layer, int slot) {
  if (!opt_.exact) throw Error("internal: the replay ring exists in exact mode only");
  const std::size_t i = std::size_t(layer) * opt_.num_slots + slot;
  return {rx_.data() + i * std::size_t(ring_.x), rdt_.data() + i * std::size_t(ring_.dt),
          rb_.data() + i * std::size_t(ring_.B)};
}

void MambaStateCache::save(int slot, MambaSlotImage& img) const {
  std::vector<int> heads(static_cast<std::size_t>(cfg_.num_heads));
  for (int h = 0; h < cfg_.num_heads; ++h) heads[static_cast<std::size_t>(h)] = h;
  save_heads(slot, std::move(heads), img);
}

void MambaStateCache::save_for_call(int slot, int64_t from, int64_t to, MambaSlotImage& img) const {
  std::vector<int> heads;
  for (int h = 0; h < cfg_.num_heads; ++h)
    if (!opt_.exact || opt_.grid.cell_start(h, to) > from) heads.push_back(h);
  save_heads(slot, std::move(heads), img);
}

void MambaStateCache::save_heads(int slot, std::vector<int> heads, MambaSlotImage& img) const {
  if (slot < 0 || slot >= opt_.num_slots) throw Error("internal: state image of a slot that does not exist");
  img.position = pos_[slot];
  img.heads = std::move(heads);
  const std::size_t L = static_cast<std::size_t>(layers_), hn = ssm_elems_ / std::size_t(cfg_.num_heads);
  const std::size_t ring_floats = std::size_t(ring_.x + ring_.dt + ring_.B);
  img.conv.resize(L * conv_elems_);
  img.ring.resize(L * ring_floats);
  const bool f32 = opt_.ssm_dtype == DType::F32;
  img.ssm_f32.resize(f32 ? L * img.heads.size() * hn : 0);
  img.ssm_bf16.resize(f32 ? 0 : L * img.heads.size() * hn);
  for (std::size_t l = 0; l < L; ++l) {
    const std::size_t i = l * std::size_t(opt_.num_slots) + std::size_t(slot);
    std::copy_n(conv_.data() + i * conv_elems_, conv_elems_, img.conv.data() + l * conv_elems_);
    float* r = img.ring.data() + l * ring_floats;
    std::copy_n(rx_.data() + i * std::size_t(ring_.x), std::size_t(ring_.x), r);
    std::copy_n(rdt_.data() + i * std::size_t(ring_.dt), std::size_t(ring_.dt), r + ring_.x);
    std::copy_n(rb_.data() + i * std::size_t(ring_.B), std::size_t(ring_.B), r + ring_.x + ring_.dt);
    for (std::size_t k = 0; k < img.heads.size(); ++k) {
      const std::size_t src = i * ssm_elems_ + std::size_t(img.heads[k]) * hn, dst = (l * img.heads.size() + k) * hn;
      if (f32) std::copy_n(ssm_f32_.data() + src, hn, img.ssm_f32.data() + dst);
      else std::copy_n(ssm_bf16_.data() + src, hn, img.ssm_bf16.data() + dst);
    }
  }
}

void MambaStateCache::load(int slot, const MambaSlotImage& img) {
  if (slot < 0 || slot >= opt_.num_slots || !used_[slot]) throw Error("internal: state image loaded into a free slot");
  const std::size_t L = static_cast<std::size_t>(layers_), hn = ssm_elems_ / std::size_t(cfg_.num_heads);
  const std::size_t ring_floats = std::size_t(ring_.x + ring_.dt + ring_.B);
  const bool f32 = opt_.ssm_dtype == DType::F32;
  if (img.conv.size() != L * conv_elems_ || img.ring.size() != L * ring_floats ||
      (f32 ? img.ssm_f32.size() : img.ssm_bf16.size()) != L * img.heads.size() * hn)
    throw Error("internal: state image made for another cache layout");
  for (std::size_t l = 0; l < L; ++l) {
    const std::size_t i = l * std::size_t(opt_.num_slots) + std::size_t(slot);
    std::copy_n(img.conv.data() + l * conv_elems_, conv_elems_, conv_.data() + i * conv_elems_);
    const float* r = img.ring.data() + l * ring_floats;
    std::copy_n(r, std::size_t(ring_.x), rx_.data() + i * std::size_t(ring_.x));
    std::copy_n(r + ring_.x, std::size_t(ring_.dt), rdt_.data() + i * std::size_t(ring_.dt));
    std::copy_n(r + ring_.x + ring_.dt, std::size_t(ring_.B), rb_.data() + i * std::size_t(ring_.B));
    for (std::size_t k = 0; k < img.heads.size(); ++k) {
      const std::size_t dst = i * ssm_elems_ + std::size_t(img.heads[k]) * hn, src = (l * img.heads.size() + k) * hn;
      if (f32) std::copy_n(img.ssm_f32.data() + src, hn, ssm_f32_.data() + dst);
      else std::copy_n(img.ssm_bf16.data() + src, hn, ssm_bf16_.data() + dst);
    }
  }
  pos_[slot] = img.position;
}

}  // namespace parity::cache
