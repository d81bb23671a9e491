#pragma once
// Per-sequence recurrent memory of every Mamba2 layer, one *slot* per live sequence:
//   conv state   (k-1) × conv_dim fp32   the last k-1 conv inputs
//   SSM state    H × P × N  fp32 | bf16  plain mode: the state after the last token;
//                                        exact mode: per head the *boundary state* at the
//                                        head's last boundary of the exact grid
//   replay ring  exact mode only: x, dt, B of the last `cell` positions, enough to re-feed
//                every head's current cell (layout in kernels/ssd_grid.h)
// Kernels know nothing of slots; the model reads and writes them through this class.
#include <cstdint>
#include <string>
#include <vector>

#include "common/aligned.h"
#include "common/dtype.h"
#include "io/hf_config.h"
#include "kernels/exact_grid.h"
#include "kernels/ssd_grid.h"

namespace parity::cache {

struct MambaCacheOptions {
  int num_slots = 1;
  DType ssm_dtype = DType::F32;  // F32 or BF16
  bool exact = false;            // keep the boundary state on the exact grid and its replay ring
  kernels::ExactGrid grid;       // exact mode's grid (nheads is filled in from the model)
};

// Bytes one sequence needs, by part, for the planner's report.
struct SlotBytes {
  std::size_t conv = 0, ssm = 0, replay = 0;
  std::size_t total() const { return conv + ssm + replay; }
};

SlotBytes slot_bytes(const io::Mamba2Config& cfg, int num_mamba_layers, const MambaCacheOptions& opt);

// The SSD kernels' view of a Mamba2 mixer's shape.
kernels::SsdShape ssd_shape(const io::Mamba2Config& cfg);

// Throws parity::Error naming the problem when the options are unusable (dtype, grid, slots).
void validate(const MambaCacheOptions& opt);

// A copy of one slot's state: the whole of it for the prefix cache (cache/prefix_cache.h), or only
// what one call over positions [from, to) can change, for the speculative rollback
// (MambaStateCache::save_for_call). Loading it back gives the slot the bytes it had.
struct MambaSlotImage {
  int64_t position = 0;
  std::vector<float> conv;        // [layer][(k-1)·conv_dim]
  std::vector<float> ring;        // [layer][x | dt | B], exact mode only
  std::vector<int> heads;         // heads whose SSM state is held
  std::vector<float> ssm_f32;     // [layer][heads.size()][P·N] (fp32 caches)
  std::vector<uint16_t> ssm_bf16; // same layout (bf16 caches)
  // Tensor parallelism: ranks 1, 2, … hold their own heads' state (this image's fields are rank 0's).
  std::vector<MambaSlotImage> ranks;
  std::size_t bytes() const {
    std::size_t b = (conv.size() + ring.size() + ssm_f32.size()) * sizeof(float) +
                    ssm_bf16.size() * sizeof(uint16_t) + heads.size() * sizeof(int);
    for (const MambaSlotImage& r : ranks) b += r.bytes();
    return b;
  }
};

class MambaStateCache {
 public:
  MambaStateCache(const io::Mamba2Config& cfg, int num_mamba_layers, const MambaCacheOptions& opt);

  const MambaCacheOptions& options() const { return opt_; }
  int num_slots() const { return opt_.num_slots; }
  int num_free() const;

  // Takes a free slot and zeroes it (a new sequence starts from the zero state at position 0).
  // Returns -1 when none is free.
  int allocate();
  void release(int slot);
  bool in_use(int slot) const { return used_[slot] != 0; }

  // Position of the next token the slot expects: the engine passes it as a chunk's start and
  // the model checks it, so a scheduling bug is an error, not silently wrong numbers.
  int64_t position(int slot) const { return pos_[slot]; }
  void set_position(int slot, int64_t p) { pos_[slot] = p; }

  float* conv_state(int layer, int slot);
  // Direct fp32 state (F32 caches only).
  float* ssm_f32(int layer, int slot);
  // Direct bf16 state (BF16 caches only: plain mode's default, updated in place by ssu_step_bf16).
  uint16_t* ssm_bf16(int layer, int slot);
  // fp32 copy of the SSM state whatever the dtype; bf16 caches round once on store.
  void load_ssm(int layer, int slot, float* dst) const;
  void store_ssm(int layer, int slot, const float* src);  // rounds once for bf16

  // Exact mode: the boundary states of the slot in the cache dtype, and its replay ring.
  kernels::GridState grid_state(int layer, int slot);
  kernels::ReplayRing ring(int layer, int slot);
  const kernels::ExactGrid& grid() const { return opt_.grid; }

  SlotBytes bytes_per_slot() const { return bytes_; }

  // The whole state of the slot at its current position.
  void save(int slot, MambaSlotImage& img) const;
  // What a call over positions [from, to) can change: the conv state, the replay ring and, in
  // exact mode, the boundary states of the heads with a grid boundary in (from, to] (plain mode:
  // every head). Cheaper than save() when the call is short (a speculative verification).
  void save_for_call(int slot, int64_t from, int64_t to, MambaSlotImage& img) const;
  // Writes the image back and sets the slot's position to img.position.
  void load(int slot, const MambaSlotImage& img);

 private:
  io::Mamba2Config cfg_;
  int layers_;
  MambaCacheOptions opt_;
  SlotBytes bytes_;
  std::size_t conv_elems_, ssm_elems_;
  kernels::RingSizes ring_{0, 0, 0};
  AlignedBuffer<float> conv_;
  AlignedBuffer<float> ssm_f32_;
  AlignedBuffer<uint16_t> ssm_bf16_;
  AlignedBuffer<float> rx_, rdt_, rb_;
  std::vector<uint8_t> used_;
  std::vector<int64_t> pos_;

  void save_heads(int slot, std::vector<int> heads, MambaSlotImage& img) const;
};

}  // namespace parity::cache
