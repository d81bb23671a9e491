#pragma once
// Tensor parallelism in one process (docs/tensor-parallel.md): a model::Model that owns one model per
// rank, each holding its slice of the weights (model/tp_plan.h) and its part of the shared cache
// (cache::ModelCacheSpec::tensor_parallel), and runs every forward on all ranks at once, rank 0 on the
// caller's thread and the others on worker threads (model/rank_workers.h). Row-split projections end in
// the collective's rank-ordered sum, so exact mode holds under any schedule; probe hooks see whole-width
// tensors (model/rank_probe_hooks.h). The engine, scheduler and caches above see one model.
//
// The ranks are CPU ranks by default. A backend may supply its own rank models (RankBackend): the CUDA
// backend's ranks are its device models, whose sums go through a device collective of its own
// (backend_cuda/cuda_tensor_parallel.h); this class drives them the same way and stays device-agnostic.
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model/column_split.h"
#include "model/in_process_collective.h"
#include "model/model.h"
#include "model/rank_workers.h"

namespace parity::model {

// What one rank's model is made from.
struct RankSource {
  const Checkpoint& ck;                // the rank's slice of the weights (rank_checkpoint.h); config.json whole
  const cache::ModelCacheSpec& cache;  // the whole model's cache spec (tensor_parallel = tp)
  TensorParallelRank tp;               // rank, size and the host collective (probe hooks; CPU ranks' sums)
};

// Where the ranks run, when not on the CPU.
struct RankBackend {
  // Rank src.tp.rank's model. Called for rank 0, 1, … in order, on the loading thread.
  std::function<std::unique_ptr<Model>(const RankSource&)> make_rank;
  bool state_on_device = false;  // the ranks keep their Mamba state and K/V in their own memory
  // Called when a rank fails mid-pass, besides the host collective's abort: releases ranks waiting in
  // the backend's own collective. May be empty.
  std::function<void()> abort;
  std::string placement;  // Model::placement(): where the ranks run and how they meet
};

class TensorParallelModel : public Model {
 public:
  // Loads MODEL's checkpoint on tp CPU ranks. parity::Error when the split does not fit the model
  // (a Mamba group cut in two, heads or widths that tp does not divide), naming the field and tp.
  static std::unique_ptr<TensorParallelModel> load(const Checkpoint& ck, int tp, const ModelOptions& opts = {});
  // The same split and refusals, with the backend's rank models.
  static std::unique_ptr<TensorParallelModel> load(const Checkpoint& ck, int tp, const RankBackend& backend);

  int tensor_parallel_size() const { return static_cast<int>(ranks_.size()); }
  const Model& rank(int r) const { return *ranks_[static_cast<std::size_t>(r)]; }

  const std::string& architecture() const override { return ranks_[0]->architecture(); }
  const std::string& origin() const override { return ranks_[0]->origin(); }
  int vocab_size() const override { return ranks_[0]->vocab_size(); }
  const cache::ModelCacheSpec& cache_spec() const override { return spec_; }
  std::vector<ProbePoint> probe_points() const override { return probes_; }
  void forward(const ForwardBatch& batch, cache::ModelCache& cache, ScanMode mode, float* logits,
               ProbeHooks* hooks = nullptr) const override;
  int default_exact_cell() const override { return ranks_[0]->default_exact_cell(); }
  std::string exact_refusal(const kernels::ExactGrid& grid) const override { return ranks_[0]->exact_refusal(grid); }
  const char* device() const override { return ranks_[0]->device(); }
  // Rank 0's device: where the ranks share one device this is all of them; with a device each, the
  // caches' share of it is conservative (each rank holds 1/tp of them).
  std::optional<DeviceMemory> device_memory() const override { return ranks_[0]->device_memory(); }
  std::string placement() const override { return placement_; }
  // Rank 0's: the ranks' logits reach the caller through rank 0's device.
  HostFloats host_floats(std::size_t n) const override { return ranks_[0]->host_floats(n); }

 private:
  explicit TensorParallelModel(int tp) : collective_(tp), workers_(tp) {}
  static std::unique_ptr<TensorParallelModel> load_with(const Checkpoint& ck, int tp, const ModelOptions& opts,
                                                        const RankBackend* backend);

  cache::ModelCacheSpec spec_;  // the whole model's, tensor_parallel = tp
  std::vector<ProbePoint> probes_;
  std::map<std::string, ColumnSplit> sharded_probes_;
  std::function<void()> backend_abort_;
  std::string placement_;
  mutable InProcessCollective collective_;
  mutable RankWorkers workers_;
  mutable std::mutex forward_mu_;
  std::vector<std::unique_ptr<Model>> ranks_;  // last: destroyed first, while the collective still exists
};

// TensorParallelModel::load's refusals (an architecture without a plan, a Mamba group cut in two,
// heads or widths that tp does not divide) without loading a weight: a backend checks the split before
// it touches a device.
void check_tensor_parallel_split(const Checkpoint& ck, int tp);

// load_model, or TensorParallelModel::load when tp > 1.
std::unique_ptr<Model> load_model(const Checkpoint& ck, int tensor_parallel_size, const ModelOptions& opts = {});

}  // namespace parity::model
