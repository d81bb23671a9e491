#include "model/tensor_parallel_model.h"

#include "cache/rank_shape.h"
#include "common/error.h"
#include "io/hf_config.h"
#include "io/hybrid_spec.h"
#include "model/hybrid_model.h"
#include "model/mamba2_model.h"
#include "model/rank_checkpoint.h"
#include "model/rank_probe_hooks.h"
#include "model/tp_plan.h"

namespace parity::model {

std::unique_ptr<TensorParallelModel> TensorParallelModel::load(const Checkpoint& ck, int tp, const ModelOptions& opts) {
  if (tp < 1) throw Error("tensor parallel size must be at least 1, not " + std::to_string(tp));
  const std::string arch = io::architecture_of(ck.config);
  auto m = std::unique_ptr<TensorParallelModel>(new TensorParallelModel(tp));
  cache::ModelCacheSpec& spec = m->spec_;
  spec.tensor_parallel = tp;
  TpPlan plan;
  if (arch == "Mamba2ForCausalLM") {
    const io::Mamba2Config whole = io::parse_mamba2_config(ck.config);
    plan = mamba2_tp_plan(whole, tp);
    const io::Mamba2Config rank_cfg = cache::rank_mamba_config(whole, tp);
    spec.num_mamba_layers = whole.num_hidden_layers;
    spec.mamba = whole;
    spec.chunk_size = whole.chunk_size;
    m->probes_ = mamba2_probe_points(whole);
    for (int r = 0; r < tp; ++r)
      m->ranks_.push_back(
          Mamba2Model::load_rank(rank_checkpoint(ck, plan.tensors, r, tp), rank_cfg, spec, {r, tp, &m->collective_}));
  } else if (io::is_hybrid_architecture(arch)) {
    const io::HybridSpec whole =
        io::hybrid_spec_from_config(ck.config, [&ck](const std::string& n) { return ck.find(n) != nullptr; });
    plan = hybrid_tp_plan(whole, tp);
    const io::HybridSpec rank_spec = rank_hybrid_spec(whole, tp);
    spec.num_mamba_layers = whole.num_mamba;
    spec.mamba = whole.mamba;
    spec.num_attention_layers = whole.num_attention;
    spec.num_kv_heads = whole.kv_heads;
    spec.head_dim = whole.head_dim;
    spec.chunk_size = whole.mamba.chunk_size;
    m->probes_ = hybrid_probe_points(whole);
    for (int r = 0; r < tp; ++r)
      m->ranks_.push_back(HybridModel::load_rank(rank_checkpoint(ck, plan.tensors, r, tp), rank_spec, opts, spec,
                                                 {r, tp, &m->collective_}));
  } else {
    load_model(ck, opts);  // refuses the architecture, naming the supported ones
    throw Error("internal: " + arch + " has no tensor-parallel plan");
  }
  m->sharded_probes_ = std::move(plan.probes);
  return m;
}

void TensorParallelModel::forward(const ForwardBatch& b, cache::ModelCache& mc, ScanMode mode, float* logits,
                                  ProbeHooks* hooks) const {
  // Checked once, before any rank starts: every rank would refuse the same batch.
  validate_batch(*this, b, mc, mode);
  std::lock_guard<std::mutex> lock(forward_mu_);  // the ranks' collective serves one pass at a time
  const int tp = tensor_parallel_size();
  // Every rank computes the same final hidden rows; only rank 0 turns them into the asked-for logits.
  ForwardBatch others = b;
  others.logit_rows.clear();
  std::vector<RankProbeHooks> rank_hooks;
  if (hooks) {
    rank_hooks.reserve(static_cast<std::size_t>(tp));
    for (int r = 0; r < tp; ++r) rank_hooks.emplace_back(hooks, &sharded_probes_, TensorParallelRank{r, tp, &collective_});
  }
  collective_.reset();
  workers_.run(
      [&](int r) {
        ranks_[static_cast<std::size_t>(r)]->forward(r == 0 ? b : others, mc, mode, r == 0 ? logits : nullptr,
                                                     hooks ? &rank_hooks[static_cast<std::size_t>(r)] : nullptr);
      },
      [&](int) { collective_.abort(); });
  for (const SeqChunk& s : b.seqs) mc.set_position(s.slot, s.start + s.n);
}

std::unique_ptr<Model> load_model(const Checkpoint& ck, int tensor_parallel_size, const ModelOptions& opts) {
  if (tensor_parallel_size == 1) return load_model(ck, opts);
  return TensorParallelModel::load(ck, tensor_parallel_size, opts);
}

}  // namespace parity::model
