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
namespace {

io::HybridSpec whole_hybrid_spec(const Checkpoint& ck) {
  return io::hybrid_spec_from_config(ck.config, [&ck](const std::string& n) { return ck.find(n) != nullptr; });
}

}  // namespace

std::unique_ptr<TensorParallelModel> TensorParallelModel::load(const Checkpoint& ck, int tp, const ModelOptions& opts) {
  return load_with(ck, tp, opts, nullptr);
}

std::unique_ptr<TensorParallelModel> TensorParallelModel::load(const Checkpoint& ck, int tp,
                                                               const RankBackend& backend) {
  return load_with(ck, tp, {}, &backend);
}

std::unique_ptr<TensorParallelModel> TensorParallelModel::load_with(const Checkpoint& ck, int tp,
                                                                    const ModelOptions& opts,
                                                                    const RankBackend* backend) {
  if (tp < 1) throw Error("tensor parallel size must be at least 1, not " + std::to_string(tp));
  const std::string arch = io::architecture_of(ck.config);
  auto m = std::unique_ptr<TensorParallelModel>(new TensorParallelModel(tp));
  cache::ModelCacheSpec& spec = m->spec_;
  spec.tensor_parallel = tp;
  TpPlan plan;
  // The CPU ranks' models, from the rank-shaped config or spec (the backend's factory makes its own).
  std::function<std::unique_ptr<Model>(const RankSource&)> cpu_rank;
  if (arch == "Mamba2ForCausalLM") {
    const io::Mamba2Config whole = io::parse_mamba2_config(ck.config);
    plan = mamba2_tp_plan(whole, tp);
    spec.num_mamba_layers = whole.num_hidden_layers;
    spec.mamba = whole;
    spec.chunk_size = whole.chunk_size;
    m->probes_ = mamba2_probe_points(whole);
    const io::Mamba2Config rank_cfg = cache::rank_mamba_config(whole, tp);
    cpu_rank = [rank_cfg](const RankSource& s) { return Mamba2Model::load_rank(s.ck, rank_cfg, s.cache, s.tp); };
  } else if (io::is_hybrid_architecture(arch)) {
    const io::HybridSpec whole = whole_hybrid_spec(ck);
    plan = hybrid_tp_plan(whole, tp);
    spec.num_mamba_layers = whole.num_mamba;
    spec.mamba = whole.mamba;
    spec.num_attention_layers = whole.num_attention;
    spec.num_kv_heads = whole.kv_heads;
    spec.head_dim = whole.head_dim;
    spec.chunk_size = whole.mamba.chunk_size;
    m->probes_ = hybrid_probe_points(whole);
    const io::HybridSpec rank_spec = rank_hybrid_spec(whole, tp);
    cpu_rank = [rank_spec, opts](const RankSource& s) {
      return HybridModel::load_rank(s.ck, rank_spec, opts, s.cache, s.tp);
    };
  } else {
    load_model(ck, opts);  // refuses the architecture, naming the supported ones
    throw Error("internal: " + arch + " has no tensor-parallel plan");
  }
  if (backend) {
    spec.state_on_device = backend->state_on_device;
    m->backend_abort_ = backend->abort;
    m->placement_ = backend->placement;
  } else {
    m->placement_ = "tensor parallel " + std::to_string(tp) + ": CPU ranks (worker threads), in-process collective";
  }
  for (int r = 0; r < tp; ++r) {
    const Checkpoint rank_ck = rank_checkpoint(ck, plan.tensors, r, tp);
    const RankSource src{rank_ck, spec, {r, tp, &m->collective_}};
    m->ranks_.push_back(backend ? backend->make_rank(src) : cpu_rank(src));
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
      [&](int) {
        collective_.abort();
        if (backend_abort_) backend_abort_();
      });
  for (const SeqChunk& s : b.seqs) mc.set_position(s.slot, s.start + s.n);
}

void check_tensor_parallel_split(const Checkpoint& ck, int tp) {
  if (tp < 1) throw Error("tensor parallel size must be at least 1, not " + std::to_string(tp));
  const std::string arch = io::architecture_of(ck.config);
  if (arch == "Mamba2ForCausalLM") mamba2_tp_plan(io::parse_mamba2_config(ck.config), tp);
  else if (io::is_hybrid_architecture(arch)) hybrid_tp_plan(whole_hybrid_spec(ck), tp);
  else throw Error(ck.origin + ": architecture '" + arch + "' has no tensor-parallel plan");
}

std::unique_ptr<Model> load_model(const Checkpoint& ck, int tensor_parallel_size, const ModelOptions& opts) {
  if (tensor_parallel_size == 1) return load_model(ck, opts);
  return TensorParallelModel::load(ck, tensor_parallel_size, opts);
}

}  // namespace parity::model
