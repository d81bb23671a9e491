#pragma once
// One engine's recurrent memory on the GPU: per Mamba layer and slot the conv state, the SSM state
// (exact mode: the boundary state) in the cache dtype and, in exact mode, the replay ring of one
// cell; for hybrids, the attention layers' K and V blocks (the host KvCache keeps the block tables,
// reference counts and free list; physical block b is block b here). Attached to the engine's
// cache::ModelCache (backend_state()), so it lives and dies with it.
//
// With CUDA graphs on, it also holds one scratch slot (index `slots`, after the engine's) and one
// scratch KV block (index num_blocks): a decode pass padded up to its graph's batch size gives its
// padding rows that slot and block, so they write where no sequence reads (decode_graphs.h).
#include <cstdint>

#include "backend_cuda/device_collective.h"
#include "cache/model_cache.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"
#include "model/forward_batch.h"

namespace parity::backend_cuda {

struct DeviceState {
  uint64_t id = 0;  // unique per made state: what a CUDA graph that captured its pointers is keyed by
  int layers = 0, slots = 0, cell = 0;
  bool exact = false, bf16 = false;
  bool scratch = false;  // one slot and one KV block past the engine's, for padding rows
  int slot_stride = 0;   // slots (+1 with the scratch slot): the per-layer arrays' slot count
  std::size_t conv_per_slot = 0, ssm_per_slot = 0, ringx_per_slot = 0, ringdt_per_slot = 0, ringb_per_slot = 0;
  cuda::DeviceBuffer<float> conv;       // [layer][slot][K-1][conv_dim]
  cuda::DeviceBuffer<float> ssm_f32;    // [layer][slot][H][P][N]
  cuda::DeviceBuffer<uint16_t> ssm_bf16;
  cuda::DeviceBuffer<float> ring_x, ring_dt, ring_B;
  int kv_layers = 0;
  int kv_scratch_block = -1;              // the scratch block's index (num_blocks), -1 without
  std::size_t kv_layer_floats = 0;        // (num_blocks + scratch) · block_floats
  cuda::DeviceBuffer<float> kv_k, kv_v;   // [attention layer][block][kernels/attention.h layout]

  static DeviceState make(const io::Mamba2Config& cfg, int layers, const cache::ModelCacheOptions& opt, int cell,
                          bool scratch);
  int scratch_slot() const { return slots; }
  cuda::SsdState ssd(int layer);
  float* conv_state(int layer) { return conv.data() + static_cast<std::size_t>(layer) * slot_stride * conv_per_slot; }
  float* k_cache(int layer) { return kv_k.data() + static_cast<std::size_t>(layer) * kv_layer_floats; }
  float* v_cache(int layer) { return kv_v.data() + static_cast<std::size_t>(layer) * kv_layer_floats; }
  // New sequences start from zero: clears every layer's conv and SSM state of the given slots.
  void zero_slots(const int32_t* slots_dev, int n, cudaStream_t s);
  std::size_t bytes() const;
};

// The cache's device state, made on first use for this cache's shape and numerics; scratch: with
// the padding rows' slot and block (a state made with them serves a caller that needs none).
// Under tensor parallelism (mc.spec().tensor_parallel > 1) each rank has its own, of its mixer shape
// cfg and its KV heads, made on the device current when the rank first asks; ranks may ask at once
// from their threads. The states are freed with the cache, each with its device current.
DeviceState& device_state_of(cache::ModelCache& mc, const io::Mamba2Config& cfg, int cell, bool scratch,
                             int rank = 0);

// The scan grid of a pass in `mode` on a cache with these options (exact: the cache's grid;
// plain: kCudaPlainCell rows restarting at each call). Throws for an exact cell the GPU cannot run.
cuda::ScanGrid scan_grid_of(model::ScanMode mode, const cache::MambaCacheOptions& mo, int plain_cell);
// A tensor-parallel rank's grid: its `heads` heads numbered as in the whole mixer (rank · heads on), so
// they keep the whole model's stagger offsets (cache::rank_grid on the CPU). The grid as is for size 1.
cuda::ScanGrid rank_grid(cuda::ScanGrid g, int heads, const DeviceRank& rank);

}  // namespace parity::backend_cuda
