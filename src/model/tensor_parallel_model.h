#pragma once
// Tensor parallelism in one process (docs/tensor-parallel.md): a model::Model that owns one model per
// rank, each holding its slice of the weights (model/tp_plan.h) and its part of the shared cache
// (cache::ModelCacheSpec::tensor_parallel), and runs every forward on all ranks at once, rank 0 on the
// caller's thread and the others on worker threads (model/rank_workers.h). Row-split projections end in
// the collective's rank-ordered sum, so exact mode holds under any schedule; probe hooks see whole-width
// tensors (model/rank_probe_hooks.h). The engine, scheduler and caches above see one model.
//
// The ranks here are CPU ranks over an in-process collective. GPU ranks would be the CUDA backend's
// models with a NCCL Collective, one stream per device; this class would hold them the same way.
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

class TensorParallelModel : public Model {
 public:
  // Loads MODEL's checkpoint on tp CPU ranks. parity::Error when the split does not fit the model
  // (a Mamba group cut in two, heads or widths that tp does not divide), naming the field and tp.
  static std::unique_ptr<TensorParallelModel> load(const Checkpoint& ck, int tp, const ModelOptions& opts = {});

  int tensor_parallel_size() const { return static_cast<int>(ranks_.size()); }

  const std::string& architecture() const override { return ranks_[0]->architecture(); }
  const std::string& origin() const override { return ranks_[0]->origin(); }
  int vocab_size() const override { return ranks_[0]->vocab_size(); }
  const cache::ModelCacheSpec& cache_spec() const override { return spec_; }
  std::vector<ProbePoint> probe_points() const override { return probes_; }
  void forward(const ForwardBatch& batch, cache::ModelCache& cache, ScanMode mode, float* logits,
               ProbeHooks* hooks = nullptr) const override;
  int default_exact_cell() const override { return ranks_[0]->default_exact_cell(); }

 private:
  explicit TensorParallelModel(int tp) : collective_(tp), workers_(tp) {}

  cache::ModelCacheSpec spec_;  // the whole model's, tensor_parallel = tp
  std::vector<ProbePoint> probes_;
  std::map<std::string, ColumnSplit> sharded_probes_;
  mutable InProcessCollective collective_;
  mutable RankWorkers workers_;
  mutable std::mutex forward_mu_;
  std::vector<std::unique_ptr<Model>> ranks_;
};

// load_model, or TensorParallelModel::load when tp > 1.
std::unique_ptr<Model> load_model(const Checkpoint& ck, int tensor_parallel_size, const ModelOptions& opts = {});

}  // namespace parity::model
