#pragma once
// Per-sequence recurrent memory of every Mamba2 layer, one *slot* per live sequence:
//   conv state   (k-1) × conv_dim fp32   the last k-1 conv inputs
//   SSM state    H × P × N  fp32 | bf16  plain mode: the state after the last token;
//                                        exact mode: the fp32 *boundary state* at the last
//                                        multiple of chunk_size
//   running      exact mode only: fp32 fold of the rows since the boundary (becomes the next
//                boundary state when the chunk completes; decode advances it a group of rows
//                at a time)
//   replay rows  exact mode only: x, dt, B of the tokens since the boundary,
//                at most chunk_size rows each (C is never needed: replayed rows emit nothing)
// Kernels know nothing of slots; the model reads and writes them through this class.
#include <cstdint>
#include <string>
#include <vector>

#include "common/aligned.h"
#include "common/dtype.h"
#include "io/hf_config.h"

namespace parity::cache {

struct MambaCacheOptions {
  int num_slots = 1;
  DType ssm_dtype = DType::F32;  // F32 or BF16
  bool exact = false;            // keep replay rows (requires F32; checked by validate())
};

// Bytes one sequence needs, by part, for the planner's report.
struct SlotBytes {
  std::size_t conv = 0, ssm = 0, running = 0, replay = 0;
  std::size_t total() const { return conv + ssm + running + replay; }
};

SlotBytes slot_bytes(const io::Mamba2Config& cfg, int num_mamba_layers, const MambaCacheOptions& opt);

// Throws parity::Error when the options cannot give the promised numerics (exact + bf16).
void validate(const MambaCacheOptions& opt);

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
  // Direct fp32 state (F32 caches only: exact mode always, plain mode with float32).
  float* ssm_f32(int layer, int slot);
  // Direct bf16 state (BF16 caches only: plain mode's default, updated in place by ssu_step_bf16).
  uint16_t* ssm_bf16(int layer, int slot);
  // fp32 copy of the SSM state whatever the dtype; bf16 caches round once on store.
  void load_ssm(int layer, int slot, float* dst) const;
  void store_ssm(int layer, int slot, const float* src);  // rounds once for bf16

  // Running fold since the boundary (exact mode), per head the fold of the chunk's first rows.
  // running_rows() is the count every head holds at least: what the last multi-token call left
  // (0 at a chunk start). Decode steps since then fold each head's rows in staggered groups
  // (model::decode_fold), so a head may hold more, computed from this count and the position.
  float* running(int layer, int slot);
  int& running_rows(int layer, int slot);

  // Replay rows (exact mode), chunk_size rows each; row i = position boundary + i. x is kept
  // HEAD-MAJOR, [heads][chunk_size][head_dim]: a decode step reads every earlier row of a head, and
  // a head's rows are then one contiguous stream instead of 256-byte pieces a row apart (the
  // layout kernels::ssd_decode_rows reads in place). dt is [chunk_size][heads], B
  // [chunk_size][groups·state].
  // dt is kept after softplus(raw + dt_bias) and the time_step_limit clamp: a pure function of
  // the raw dt, so keeping it instead of the raw value changes no bit and saves H softplus per
  // replayed row per step.
  float* replay_x(int layer, int slot);
  float* replay_dt(int layer, int slot);
  float* replay_b(int layer, int slot);

  SlotBytes bytes_per_slot() const { return bytes_; }

 private:
  io::Mamba2Config cfg_;
  int layers_;
  MambaCacheOptions opt_;
  SlotBytes bytes_;
  std::size_t conv_elems_, ssm_elems_, rx_elems_, rdt_elems_, rb_elems_;
  AlignedBuffer<float> conv_;
  AlignedBuffer<float> ssm_f32_;
  AlignedBuffer<uint16_t> ssm_bf16_;
  AlignedBuffer<float> run_, rx_, rdt_, rb_;
  std::vector<uint8_t> used_;
  std::vector<int64_t> pos_;
  std::vector<int> folded_;  // per (layer, slot): rows in the running fold
};

}  // namespace parity::cache
