#include "backend_cuda/device_state.h"

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/error.h"

namespace parity::backend_cuda {
namespace {

uint64_t next_state_id() {
  static std::atomic<uint64_t> n{0};
  return ++n;
}

}  // namespace

DeviceState DeviceState::make(const io::Mamba2Config& c, int layers, const cache::ModelCacheOptions& opt, int cell,
                              bool scratch) {
  DeviceState d;
  d.id = next_state_id();
  d.layers = layers;
  d.slots = opt.mamba.num_slots;
  d.exact = opt.mamba.exact;
  d.bf16 = opt.mamba.ssm_dtype == DType::BF16;
  d.cell = cell;
  d.scratch = scratch;
  d.slot_stride = d.slots + (scratch ? 1 : 0);
  const std::size_t H = c.num_heads, P = c.head_dim, N = c.state_size, G = c.n_groups;
  d.conv_per_slot = static_cast<std::size_t>(c.conv_kernel - 1) * c.conv_dim();
  d.ssm_per_slot = H * P * N;
  const std::size_t LS = static_cast<std::size_t>(layers) * d.slot_stride;
  d.conv = cuda::DeviceBuffer<float>(LS * d.conv_per_slot);
  if (d.bf16) d.ssm_bf16 = cuda::DeviceBuffer<uint16_t>(LS * d.ssm_per_slot);
  else d.ssm_f32 = cuda::DeviceBuffer<float>(LS * d.ssm_per_slot);
  if (d.exact) {
    d.ringx_per_slot = H * cell * P;
    d.ringdt_per_slot = H * cell;
    d.ringb_per_slot = G * cell * N;
    d.ring_x = cuda::DeviceBuffer<float>(LS * d.ringx_per_slot);
    d.ring_dt = cuda::DeviceBuffer<float>(LS * d.ringdt_per_slot);
    d.ring_B = cuda::DeviceBuffer<float>(LS * d.ringb_per_slot);
  }
  return d;
}

cuda::SsdState DeviceState::ssd(int layer) {
  const std::size_t l = static_cast<std::size_t>(layer) * slot_stride;
  cuda::SsdState s;
  if (bf16) s.state_bf16 = ssm_bf16.data() + l * ssm_per_slot;
  else s.state_f32 = ssm_f32.data() + l * ssm_per_slot;
  if (exact) {
    s.ring_x = ring_x.data() + l * ringx_per_slot;
    s.ring_dt = ring_dt.data() + l * ringdt_per_slot;
    s.ring_B = ring_B.data() + l * ringb_per_slot;
  }
  return s;
}

void DeviceState::zero_slots(const int32_t* slots_dev, int n, cudaStream_t s) {
  if (layers == 0) return;  // attention only: nothing recurrent to clear
  const std::size_t conv_b = conv_per_slot * sizeof(float);
  cuda::zero_slot_slices(conv.data(), conv_b, conv_b * slot_stride, layers, slots_dev, n, s);
  const std::size_t ssm_b = ssm_per_slot * (bf16 ? 2 : 4);
  void* base = bf16 ? static_cast<void*>(ssm_bf16.data()) : static_cast<void*>(ssm_f32.data());
  cuda::zero_slot_slices(base, ssm_b, ssm_b * slot_stride, layers, slots_dev, n, s);
}

std::size_t DeviceState::bytes() const {
  return conv.size() * 4 + ssm_f32.size() * 4 + ssm_bf16.size() * 2 + (ring_x.size() + ring_dt.size() + ring_B.size()) * 4 +
         (kv_k.size() + kv_v.size()) * 4;
}

namespace {

// One rank's state and the device it lives on: freed with that device current (cudaFree of another
// device's memory may fail).
struct RankState {
  int device = 0;
  std::shared_ptr<void> state;
  ~RankState() {
    if (!state) return;
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) return;
    cudaSetDevice(device);
    state.reset();
    cudaSetDevice(current);
  }
};

// A tensor-parallel cache's backend state: one slot per rank. Made once, under a lock (every rank may
// ask first); afterwards each rank touches only its own slot.
struct RankStates {
  std::vector<RankState> ranks;
};

std::shared_ptr<void>& state_slot(cache::ModelCache& mc, int rank) {
  const int tp = mc.spec().tensor_parallel;
  if (tp == 1) return mc.backend_state();
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::shared_ptr<void>& holder = mc.backend_state();
  if (!holder) {
    auto rs = std::make_shared<RankStates>();
    rs->ranks = std::vector<RankState>(static_cast<std::size_t>(tp));
    holder = rs;
  }
  RankState& r = static_cast<RankStates*>(holder.get())->ranks[static_cast<std::size_t>(rank)];
  cuda::cuda_check(cudaGetDevice(&r.device), "cudaGetDevice");
  return r.state;
}

}  // namespace

DeviceState& device_state_of(cache::ModelCache& mc, const io::Mamba2Config& cfg, int cell, bool scratch, int rank) {
  std::shared_ptr<void>& slot = state_slot(mc, rank);
  const cache::ModelCacheOptions& o = mc.options();
  auto* have = static_cast<DeviceState*>(slot.get());
  if (!have || have->slots != o.mamba.num_slots || have->exact != o.mamba.exact ||
      have->bf16 != (o.mamba.ssm_dtype == DType::BF16) || have->cell != cell || (scratch && !have->scratch)) {
    auto d = std::make_shared<DeviceState>(DeviceState::make(cfg, mc.spec().num_mamba_layers, o, cell, scratch));
    if (const cache::KvCache* kv = mc.kv()) {
      const int blocks = kv->num_blocks() + (scratch ? 1 : 0);
      d->kv_layers = kv->num_layers();
      d->kv_scratch_block = scratch ? kv->num_blocks() : -1;
      d->kv_layer_floats = static_cast<std::size_t>(blocks) * static_cast<std::size_t>(kv->layout().block_floats());
      d->kv_k = cuda::DeviceBuffer<float>(d->kv_layer_floats * d->kv_layers);
      d->kv_v = cuda::DeviceBuffer<float>(d->kv_layer_floats * d->kv_layers);
    }
    slot = d;
    have = d.get();
  }
  return *have;
}

cuda::ScanGrid scan_grid_of(model::ScanMode mode, const cache::MambaCacheOptions& mo, int plain_cell) {
  cuda::ScanGrid grid;
  grid.exact = mode == model::ScanMode::Exact;
  grid.cell = grid.exact ? mo.grid.cell : plain_cell;
  grid.stagger = grid.exact && mo.grid.stagger;
  grid.products = grid.exact ? mo.grid.products : kernels::ScanProducts::float32;
  if (grid.exact && grid.cell > cuda::kMaxCell)
    throw Error("--exact-grid " + std::to_string(grid.cell) + ": the CUDA backend runs exact grids of 1.." +
                std::to_string(cuda::kMaxCell) + " rows");
  return grid;
}

cuda::ScanGrid rank_grid(cuda::ScanGrid g, int heads, const DeviceRank& rank) {
  if (rank.size == 1) return g;
  g.first_head = rank.rank * heads;
  g.model_heads = rank.size * heads;
  return g;
}

}  // namespace parity::backend_cuda
