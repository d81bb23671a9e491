#pragma once
// One engine's recurrent memory on the GPU: per Mamba layer and slot the conv state, the SSM state
// (exact mode: the boundary state) in the cache dtype and, in exact mode, the replay ring of one
// cell; for hybrids, the attention layers' K and V blocks (the host KvCache keeps the block tables,
// reference counts and free list; physical block b is block b here). Attached to the engine's
// cache::ModelCache (backend_state()), so it lives and dies with it.
#include <cstdint>

#include "cache/model_cache.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"

namespace parity::backend_cuda {

struct DeviceState {
  int layers = 0, slots = 0, cell = 0;
  bool exact = false, bf16 = false;
  std::size_t conv_per_slot = 0, ssm_per_slot = 0, ringx_per_slot = 0, ringdt_per_slot = 0, ringb_per_slot = 0;
  cuda::DeviceBuffer<float> conv;       // [layer][slot][K-1][conv_dim]
  cuda::DeviceBuffer<float> ssm_f32;    // [layer][slot][H][P][N]
  cuda::DeviceBuffer<uint16_t> ssm_bf16;
  cuda::DeviceBuffer<float> ring_x, ring_dt, ring_B;
  int kv_layers = 0;
  std::size_t kv_layer_floats = 0;        // num_blocks · block_floats
  cuda::DeviceBuffer<float> kv_k, kv_v;   // [attention layer][block][kernels/attention.h layout]

  static DeviceState make(const io::Mamba2Config& cfg, int layers, const cache::ModelCacheOptions& opt, int cell);
  cuda::SsdState ssd(int layer);
  float* conv_state(int layer) { return conv.data() + static_cast<std::size_t>(layer) * slots * conv_per_slot; }
  float* k_cache(int layer) { return kv_k.data() + static_cast<std::size_t>(layer) * kv_layer_floats; }
  float* v_cache(int layer) { return kv_v.data() + static_cast<std::size_t>(layer) * kv_layer_floats; }
  // New sequences start from zero: clears every layer's conv and SSM state of the given slots.
  void zero_slots(const int32_t* slots_dev, int n, cudaStream_t s);
  std::size_t bytes() const;
};

// The cache's device state, made on first use for this cache's shape and numerics.
DeviceState& device_state_of(cache::ModelCache& mc, const io::Mamba2Config& cfg, int cell);

}  // namespace parity::backend_cuda
