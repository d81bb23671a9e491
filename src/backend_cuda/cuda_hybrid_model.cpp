#include "backend_cuda/cuda_hybrid_model.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backend_cuda/cuda_mamba2_model.h"
#include "backend_cuda/device_guard.h"
#include "backend_cuda/device_state.h"
#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/math.h"
#include "kernels_cuda/attention.h"
#include "kernels_cuda/moe_dense.h"
#include "kernels_cuda/pass_plan.h"
#include "model/weight_loading.h"

namespace parity::backend_cuda {
namespace {

using io::GraniteLayerType;
using Weight = CudaHybridModel::Weight;

std::vector<float> tensor(const model::Checkpoint& ck, const std::string& name, std::vector<int64_t> shape) {
  return model::widen(model::need_tensor(ck, name, shape));
}

void upload_f32(cuda::DeviceBuffer<float>& d, const std::vector<float>& v) {
  if (!v.empty()) d.upload(v);
}

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}

// [rows][k] as the run computes with it: bf16 padded with zero rows to whole 16-row strips (gemm's
// w_rows: its tiles may read them), or fp32.
void upload_weight(bool fp32, const std::vector<float>& w, int rows, Weight& out) {
  out.rows = rows;
  if (fp32) {
    out.f32.upload(w);
    return;
  }
  std::vector<uint16_t> b = to_bf16(w);
  b.resize(static_cast<std::size_t>(cuda::padded_rows(rows)) * (w.size() / static_cast<std::size_t>(rows)), 0);
  out.bf16.upload(b);
}

}  // namespace

std::unique_ptr<CudaHybridModel> CudaHybridModel::load(const model::Checkpoint& ck, const CudaModelOptions& opt) {
  if (cuda::device_count() == 0) throw Error("--device cuda: " + describe_device());
  DeviceGuard on(0);
  const io::GraniteHybridConfig c = io::parse_granite_hybrid_config(ck.config);
  return build(ck, c, c.num_layers_of(GraniteLayerType::Mamba) > 0 ? io::to_mamba2_config(c) : io::Mamba2Config{},
               opt);
}

std::unique_ptr<CudaHybridModel> CudaHybridModel::load_rank(const model::Checkpoint& ck,
                                                            const io::GraniteHybridConfig& rank_cfg,
                                                            const io::Mamba2Config& rank_mamba,
                                                            const cache::ModelCacheSpec& cache, DeviceRank rank,
                                                            std::shared_ptr<DeviceCollective> collective,
                                                            const CudaModelOptions& opt) {
  DeviceGuard on(rank.device);
  auto m = build(ck, rank_cfg, rank_mamba, opt);
  m->spec_ = cache;
  m->spec_.state_on_device = true;
  m->rank_ = rank;
  m->collective_ = std::move(collective);
  return m;
}

// The body runs before the members are destroyed: they free their memory and stream with the
// rank's device current.
CudaHybridModel::~CudaHybridModel() { cudaSetDevice(rank_.device); }

io::GraniteHybridConfig rank_granite_config(const io::GraniteHybridConfig& whole, int tp) {
  io::GraniteHybridConfig c = whole;
  c.num_attention_heads /= tp;
  c.num_key_value_heads /= tp;
  c.intermediate_size /= tp;
  c.shared_intermediate_size /= tp;
  return c;
}

std::unique_ptr<CudaHybridModel> CudaHybridModel::build(const model::Checkpoint& ck, const io::GraniteHybridConfig& cfg,
                                                        const io::Mamba2Config& mamba, const CudaModelOptions& opt) {
  auto m = std::unique_ptr<CudaHybridModel>(new CudaHybridModel());
  m->cfg_ = cfg;
  const io::GraniteHybridConfig& c = m->cfg_;
  m->origin_ = ck.origin;
  m->fp32_ = opt.fp32;
  const int n_mamba = c.num_layers_of(GraniteLayerType::Mamba);
  const int n_attn = c.num_layers_of(GraniteLayerType::Attention);
  m->mamba_cfg_ = mamba;
  if (c.hidden_act != "silu") throw Error(ck.origin + ": hidden_act '" + c.hidden_act + "' (the GPU runs silu)");
  if (n_attn > 0 && c.head_dim % 2 != 0) throw Error(ck.origin + ": head_dim must be even");
  m->spec_.num_mamba_layers = n_mamba;
  m->spec_.mamba = m->mamba_cfg_;
  m->spec_.num_attention_layers = n_attn;
  m->spec_.num_kv_heads = c.num_key_value_heads;
  m->spec_.head_dim = c.head_dim;
  m->spec_.chunk_size = c.mamba_chunk_size;
  m->spec_.state_on_device = true;
  if (c.use_rope && n_attn > 0) {
    std::vector<float> inv(static_cast<std::size_t>(c.head_dim / 2));
    kernels::rope_inv_freq(c.head_dim, static_cast<float>(c.rope_theta), inv.data());
    m->inv_freq_.upload(inv);
  }
  const int64_t H = c.hidden_size, V = c.vocab_size;
  const bool fp32 = opt.fp32;
  const std::vector<float> E = tensor(ck, "model.embed_tokens.weight", {V, H});
  upload_weight(fp32, E, static_cast<int>(V), m->embed_);
  if (!c.tie_word_embeddings) upload_weight(fp32, tensor(ck, "lm_head.weight", {V, H}), static_cast<int>(V), m->lm_head_);
  upload_f32(m->norm_, tensor(ck, "model.norm.weight", {H}));

  const io::Mamba2Config& mc = m->mamba_cfg_;
  int mamba_seen = 0, attn_seen = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    Layer L;
    L.mamba = c.layer_types[static_cast<std::size_t>(l)] == GraniteLayerType::Mamba;
    L.ordinal = L.mamba ? mamba_seen++ : attn_seen++;
    upload_f32(L.input_norm, tensor(ck, p + ".input_layernorm.weight", {H}));
    upload_f32(L.post_norm, tensor(ck, p + ".post_attention_layernorm.weight", {H}));
    const std::string mx = p + ".mamba.", a = p + ".self_attn.";
    if (L.mamba) {
      const int64_t I = mc.intermediate_size, Hh = mc.num_heads, conv = mc.conv_dim(), proj = mc.in_proj_dim();
      upload_weight(fp32, tensor(ck, mx + "in_proj.weight", {proj, H}), static_cast<int>(proj), L.in_proj);
      if (mc.use_bias) upload_f32(L.in_proj_bias, tensor(ck, mx + "in_proj.bias", {proj}));
      upload_f32(L.conv_w, tensor(ck, mx + "conv1d.weight", {conv, 1, mc.conv_kernel}));
      if (mc.use_conv_bias) upload_f32(L.conv_b, tensor(ck, mx + "conv1d.bias", {conv}));
      upload_f32(L.dt_bias, tensor(ck, mx + "dt_bias", {Hh}));
      std::vector<float> A = tensor(ck, mx + "A_log", {Hh});
      for (float& x : A) x = -kernels::exp_f(x);  // A = -exp(A_log), as the CPU mixer
      upload_f32(L.A, A);
      upload_f32(L.D, tensor(ck, mx + "D", {Hh}));
      upload_f32(L.gate_norm, tensor(ck, mx + "norm.weight", {I}));
      upload_weight(fp32, tensor(ck, mx + "out_proj.weight", {H, I}), static_cast<int>(H), L.out_proj);
      if (mc.use_bias) upload_f32(L.out_proj_bias, tensor(ck, mx + "out_proj.bias", {H}));
    } else {
      const int64_t q = c.q_dim(), kv = c.kv_dim();
      upload_weight(fp32, tensor(ck, a + "q_proj.weight", {q, H}), static_cast<int>(q), L.q);
      upload_weight(fp32, tensor(ck, a + "k_proj.weight", {kv, H}), static_cast<int>(kv), L.k);
      upload_weight(fp32, tensor(ck, a + "v_proj.weight", {kv, H}), static_cast<int>(kv), L.v);
      upload_weight(fp32, tensor(ck, a + "o_proj.weight", {H, q}), static_cast<int>(H), L.o);
      if (c.attention_bias) {
        upload_f32(L.q_bias, tensor(ck, a + "q_proj.bias", {q}));
        upload_f32(L.k_bias, tensor(ck, a + "k_proj.bias", {kv}));
        upload_f32(L.v_bias, tensor(ck, a + "v_proj.bias", {kv}));
        upload_f32(L.o_bias, tensor(ck, a + "o_proj.bias", {H}));
      }
    }
    const std::string moe = p + ".block_sparse_moe.";
    if (c.has_experts()) {
      const int64_t Ex = c.num_local_experts, F = c.intermediate_size;
      upload_weight(fp32, tensor(ck, moe + "router.layer.weight", {Ex, H}), static_cast<int>(Ex), L.router);
      // Stacked experts: expert e's matrix starts at e · rows · cols, unpadded (moe.cu).
      const std::vector<float> in = tensor(ck, moe + "input_linear.weight", {Ex, 2 * F, H});
      const std::vector<float> out = tensor(ck, moe + "output_linear.weight", {Ex, H, F});
      if (fp32) {
        L.experts_in_f32.upload(in);
        L.experts_out_f32.upload(out);
      } else {
        L.experts_in_bf16.upload(to_bf16(in));
        L.experts_out_bf16.upload(to_bf16(out));
      }
    }
    const int64_t S = c.shared_intermediate_size;
    upload_weight(fp32, tensor(ck, p + ".shared_mlp.input_linear.weight", {2 * S, H}), static_cast<int>(2 * S),
                  L.shared_in);
    upload_weight(fp32, tensor(ck, p + ".shared_mlp.output_linear.weight", {H, S}), static_cast<int>(H), L.shared_out);
    m->layers_.push_back(std::move(L));
    m->names_.push_back({p, m->layers_.back().mamba ? p + ".mamba" : p + ".self_attn", mx + "in_proj", mx + "conv1d",
                         mx + "dt", mx + "norm", a + "q_proj", a + "k_proj", a + "v_proj", moe + "router",
                         p + ".block_sparse_moe", p + ".shared_mlp"});
  }
  for (const model::ProbePoint& pp : m->probe_points()) m->probe_names_.push_back(pp.name);
  m->enforce_eager_ = opt.enforce_eager;
  m->moe_routing_ = opt.moe_routing;
  m->run_ = std::make_unique<Run>();
  return m;
}

int CudaHybridModel::default_exact_cell() const { return kCudaDefaultExactCell; }

// The CPU model's points for Granite (model/hybrid_model.cpp), in its order.
std::vector<model::ProbePoint> CudaHybridModel::probe_points() const {
  const io::GraniteHybridConfig& c = cfg_;
  const int H = c.hidden_size;
  std::vector<model::ProbePoint> p;
  p.push_back({"model.embed_tokens", H, "token embeddings (before embedding_multiplier)"});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Names& n = names_[static_cast<std::size_t>(l)];
    if (layers_[static_cast<std::size_t>(l)].mamba) {
      p.push_back({n.in_proj, mamba_cfg_.in_proj_dim(), "in_proj output [z | xBC | dt]"});
      p.push_back({n.conv1d, mamba_cfg_.conv_dim(), "causal conv1d output over xBC, before SiLU"});
      p.push_back({n.dt, mamba_cfg_.num_heads, "raw dt (before dt_bias, softplus and clamp)"});
      p.push_back({n.norm, mamba_cfg_.intermediate_size, "gated RMSNorm output"});
      p.push_back({n.mixer, H, "mamba mixer output (out_proj), before residual_multiplier"});
    } else {
      p.push_back({n.q, c.q_dim(), "q_proj output (before RoPE)"});
      p.push_back({n.k, c.kv_dim(), "k_proj output (before RoPE)"});
      p.push_back({n.v, c.kv_dim(), "v_proj output"});
      p.push_back({n.mixer, H, "attention output (o_proj), before residual_multiplier"});
    }
    if (c.has_experts()) {
      p.push_back({n.router, c.num_local_experts, "router logits, pre-top-k (replacing them changes the routing)"});
      p.push_back({n.moe, H, "MoE output (top-k experts combined)"});
    }
    p.push_back({n.shared, H, "shared MLP output"});
    p.push_back({n.layer, H, "layer output (residual stream)"});
  }
  p.push_back({"model.norm", H, "final RMSNorm output"});
  p.push_back({"lm_head", c.vocab_size, "logits (lm_head output / logits_scaling)"});
  return p;
}

void CudaHybridModel::gemm(const float* A, int M, int K, const Weight& w, int N, const cuda::DeviceBuffer<float>& bias,
                           float* C, cudaStream_t s) const {
  const float* bp = bias.size() ? bias.data() : nullptr;
  if (fp32_) cuda::gemm(A, M, K, K, w.f32.data(), cuda::WeightType::F32, N, bp, C, N, s);
  else cuda::gemm(A, M, K, K, w.bf16.data(), cuda::WeightType::BF16, N, bp, C, N, s, cuda::padded_rows(w.rows));
}

void CudaHybridModel::reserve(Scratch& sc, int T, int head_rows) const {
  const io::GraniteHybridConfig& c = cfg_;
  const std::size_t t = static_cast<std::size_t>(T), H = c.hidden_size;
  sc.resid.resize(t * H);
  sc.normed.resize(t * H);
  sc.out.resize(t * H);
  sc.ffn.resize(t * H);
  if (c.num_layers_of(GraniteLayerType::Mamba) > 0) {
    const io::Mamba2Config& m2 = mamba_cfg_;
    sc.zx.resize(t * m2.in_proj_dim());
    sc.xbc.resize(t * m2.conv_dim());
    sc.dt.resize(t * m2.num_heads);
    sc.y.resize(t * m2.intermediate_size);
    sc.g.resize(t * m2.intermediate_size);
  }
  if (c.num_layers_of(GraniteLayerType::Attention) > 0) {
    sc.q.resize(t * c.q_dim());
    sc.k.resize(t * c.kv_dim());
    sc.v.resize(t * c.kv_dim());
    sc.attn.resize(t * c.q_dim());
  }
  if (c.has_experts()) {
    const int Ex = c.num_local_experts, K = c.num_experts_per_tok;
    sc.logits_r.resize(t * Ex);
    sc.idx.resize(t * K);
    sc.gates.resize(t * K);
    if (moe_routing_ == model::MoeRoutingPattern::Fused) sc.dense.resize(t * Ex);
    sc.moe.reserve(T, K, Ex, c.hidden_size, c.intermediate_size);
  }
  sc.gu.resize(t * 2 * c.shared_intermediate_size);
  sc.act.resize(t * c.shared_intermediate_size);
  sc.head.resize(static_cast<std::size_t>(head_rows) * H);
  sc.logits.resize(static_cast<std::size_t>(head_rows) * c.vocab_size);
}

void CudaHybridModel::forward(const model::ForwardBatch& b, cache::ModelCache& mc, model::ScanMode mode,
                              float* logits, model::ProbeHooks* hooks) const {
  model::validate_batch(*this, b, mc, mode);
  DeviceGuard on(rank_.device);
  const cuda::ScanGrid grid =
      rank_grid(scan_grid_of(mode, mc.options().mamba, kCudaPlainCell), mamba_cfg_.num_heads, rank_);
  DeviceState& ds = device_state_of(mc, mamba_cfg_, grid.exact ? grid.cell : 0, !enforce_eager_, rank_.rank);
  bool graph =
      !enforce_eager_ && !profile_ && ds.scratch && is_pure_decode(b) && !any_probe_wanted(hooks, probe_names_);
  if (graph && mc.kv()) {
    // Few decode rows over long contexts run attention_split.cu's kernels, whose grid follows the
    // context: such a pass stays eager (the row kernel a graph uses would give the same bits, slower).
    std::vector<cuda::SeqSpan> spans;
    for (const auto& q : b.seqs) spans.push_back({q.slot, q.start, q.n});
    graph = cuda::AttnPlan(spans, cfg_.num_attention_heads).num_long() == 0;
  }
  const int bucket = graph ? graph_bucket(static_cast<int>(b.seqs.size())) : 0;
  if (bucket > 0) forward_graph(b, mc, ds, grid, bucket, logits);
  else forward_eager(b, mc, ds, grid, logits, hooks);
  if (rank_.size == 1)  // ranks share the positions: their caller advances them once
    for (const auto& q : b.seqs) mc.set_position(q.slot, q.start + q.n);
}

void CudaHybridModel::forward_eager(const model::ForwardBatch& b, cache::ModelCache& mc, DeviceState& ds,
                                    const cuda::ScanGrid& grid, float* logits, model::ProbeHooks* hooks) const {
  Run& run = *run_;
  Scratch& sc = run.eager;
  const cudaStream_t st = run.stream.get();
  run.graphs.note_eager();
  const int T = static_cast<int>(b.tokens.size());
  const int R = static_cast<int>(b.logit_rows.size());
  const int H = cfg_.hidden_size, V = cfg_.vocab_size;

  std::vector<cuda::SeqSpan> spans;
  for (const auto& q : b.seqs) spans.push_back({q.slot, q.start, q.n});
  const cuda::PassPlan plan(spans, grid, b.tokens, b.logit_rows);
  const cuda::PassSeqs ps = plan.upload(sc.ints, sc.starts, sc.h_ints, sc.h_starts, st);
  const int32_t* di = sc.ints.data();
  if (plan.num_new_slots() > 0) ds.zero_slots(di + plan.new_slots_offset(), plan.num_new_slots(), st);

  // Attention's view of the pass: block tables in pass order, the rows shared out (AttnPlan).
  AttnPass ap;
  if (const cache::KvCache* kv = mc.kv()) {
    ap.layout = kv->layout();
    int stride = 1;
    for (const auto& q : b.seqs) stride = std::max(stride, kv->blocks_for(q.start + q.n));
    std::vector<int32_t> tab(static_cast<std::size_t>(stride) * b.seqs.size(), 0);
    for (std::size_t s = 0; s < b.seqs.size(); ++s) {
      const int nb = kv->blocks_for(b.seqs[s].start + b.seqs[s].n);
      std::copy_n(kv->block_table(b.seqs[s].slot), nb, tab.begin() + static_cast<std::ptrdiff_t>(s) * stride);
    }
    ap.tables = {cuda::upload_async(tab, sc.h_tables, sc.tables, st), stride};
    ap.work = cuda::AttnPlan(spans, cfg_.num_attention_heads).upload(sc.work, sc.attn_scratch, sc.h_work, st);
  }

  const DeviceProbe probe(hooks, b, st);
  const bool probe_head = probe.wants("model.norm") || probe.wants("lm_head");
  reserve(sc, T, probe_head ? T : R);
  if (spec_.num_mamba_layers > 0) sc.ssd.resize(cuda::ssd_scratch_floats(mamba_shape(), ps, grid));
  if (probe_head) sc.out.resize(static_cast<std::size_t>(R) * V);  // before any launch: no buffer moves mid-pass
  enqueue_layers(sc, ps, di + plan.tokens_offset(), T, ds, grid, ap, probe, st);
  const float* out = sc.logits.data();
  if (probe_head) {
    // Every row through the head (row-wise norm, M-invariant GEMM: the same bits per row).
    enqueue_head(sc, sc.resid.data(), T, probe, st);
    if (R > 0) {
      cuda::gather_rows(sc.logits.data(), V, di + plan.extra_offset(), R, V, sc.out.data(), st);
      out = sc.out.data();
    }
  } else if (R > 0) {
    cuda::gather_rows(sc.resid.data(), H, di + plan.extra_offset(), R, H, sc.head.data(), st);
    // Neither head point is wanted (probe_head): asking again would be one more question to the hooks,
    // which tensor-parallel ranks without logit rows (R = 0) would not ask with them.
    enqueue_head(sc, sc.head.data(), R, DeviceProbe(nullptr, b, st), st);
  }
  if (profile_) profile_->finish(st);
  if (R > 0)
    cuda::cuda_check(cudaMemcpyAsync(logits, out, static_cast<std::size_t>(R) * V * 4, cudaMemcpyDeviceToHost, st),
                     "logits to host");
  run.stream.sync("forward");
}

void CudaHybridModel::forward_graph(const model::ForwardBatch& b, cache::ModelCache& mc, DeviceState& ds,
                                    const cuda::ScanGrid& grid, int bucket, float* logits) const {
  Run& run = *run_;
  Scratch& sc = run.graph;
  const cudaStream_t st = run.stream.get();
  const PaddedDecode pd = pad_decode(b, bucket, ds.scratch_slot());
  const cuda::PassPlan plan(pd.spans, grid, pd.tokens);
  if (bucket > run.graph_rows) {
    // The graph buffers grow to the largest bucket seen (not to 256 at once: the activations and the
    // scan's scratch scale with the bucket); the graphs captured on the old buffers are then dropped.
    reserve(sc, bucket, bucket);
    sc.ints.resize(16 * static_cast<std::size_t>(bucket));
    sc.starts.resize(static_cast<std::size_t>(bucket));
    run.graph_rows = bucket;
  }
  const cuda::PassSeqs ps = plan.upload(sc.ints, sc.starts, sc.h_ints, sc.h_starts, st);
  if (spec_.num_mamba_layers > 0) sc.ssd.resize(cuda::ssd_scratch_floats(mamba_shape(), ps, grid));
  const int32_t* tokens = sc.ints.data() + plan.tokens_offset();

  // Block tables of a fixed row length (the next power of two that holds every sequence's blocks,
  // so a graph serves many steps); padding rows map every block to the scratch block.
  AttnPass ap;
  if (const cache::KvCache* kv = mc.kv()) {
    ap.layout = kv->layout();
    int need = 1;
    for (const auto& q : b.seqs) need = std::max(need, kv->blocks_for(q.start + q.n));
    int stride = 1;
    while (stride < need) stride *= 2;
    std::vector<int32_t> tab(static_cast<std::size_t>(stride) * bucket, ds.kv_scratch_block);
    for (std::size_t s = 0; s < b.seqs.size(); ++s) {
      const int nb = kv->blocks_for(b.seqs[s].start + b.seqs[s].n);
      std::copy_n(kv->block_table(b.seqs[s].slot), nb, tab.begin() + static_cast<std::ptrdiff_t>(s) * stride);
    }
    ap.tables = {cuda::upload_async(tab, sc.h_tables, sc.tables, st), stride};
  }

  const GraphEpoch epoch{ds.id, run.graph_rows, {sc.ints.data(), sc.starts.data(), sc.ssd.data(), sc.tables.data()}};
  const GraphKey key{bucket, grid.exact, grid.cell, grid.stagger, ps.num_cell_tasks, ap.tables.stride};
  const cuda::GraphExec& g = run.graphs.get(epoch, key, st, [&] {
    const DeviceProbe none(nullptr, b, st);
    enqueue_layers(sc, ps, tokens, bucket, ds, grid, ap, none, st);
    enqueue_head(sc, sc.resid.data(), bucket, none, st);
  });
  g.launch(st);
  run.graphs.note_replay();
  copy_logit_rows(sc.logits.data(), cfg_.vocab_size, b.logit_rows, logits, st);
  run.stream.sync("forward (CUDA graph)");
}

void CudaHybridModel::enqueue_layers(Scratch& sc, const cuda::PassSeqs& ps, const int32_t* tokens, int T,
                                     DeviceState& ds, const cuda::ScanGrid& grid, const AttnPass& ap,
                                     const DeviceProbe& probe, cudaStream_t st) const {
  const io::GraniteHybridConfig& c = cfg_;
  const int H = c.hidden_size;
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float res_mult = static_cast<float>(c.residual_multiplier);
  const std::size_t TD = static_cast<std::size_t>(T) * H;

  StepProfile* const pf = profile_;
  mark(pf, StepPart::Other, st);
  if (fp32_) cuda::gather_rows(embed_.f32.data(), H, tokens, T, H, sc.resid.data(), st);
  else cuda::embed_bf16(embed_.bf16.data(), tokens, T, H, sc.resid.data(), st);
  probe("model.embed_tokens", sc.resid.data(), T, H, H);
  cuda::scale_inplace(sc.resid.data(), static_cast<float>(c.embedding_multiplier), TD, st);

  const io::Mamba2Config& m2 = mamba_cfg_;
  const cuda::DeviceBuffer<float> no_bias;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& L = layers_[static_cast<std::size_t>(l)];
    const Names& nm = names_[static_cast<std::size_t>(l)];
    cuda::rmsnorm(sc.resid.data(), T, H, L.input_norm.data(), eps, sc.normed.data(), st);
    if (L.mamba) {
      // CudaMamba2Model's mixer, step for step.
      const int I = m2.intermediate_size, Hm = m2.num_heads, conv = m2.conv_dim(), proj = m2.in_proj_dim();
      mark(pf, StepPart::MambaGemm, st);
      gemm(sc.normed.data(), T, H, L.in_proj, proj, L.in_proj_bias, sc.zx.data(), st);
      probe(nm.in_proj, sc.zx.data(), T, proj, proj);
      probe(nm.dt, sc.zx.data() + I + conv, T, Hm, proj);
      const bool probe_conv = probe.wants(nm.conv1d);
      mark(pf, StepPart::MambaConv, st);
      cuda::conv1d(sc.zx.data() + I, proj, conv, L.conv_w.data(), L.conv_b.size() ? L.conv_b.data() : nullptr,
                   m2.conv_kernel, ds.conv_state(L.ordinal), ps, !probe_conv, sc.xbc.data(), st);
      if (probe_conv) {
        probe(nm.conv1d, sc.xbc.data(), T, conv, conv);
        cuda::silu_inplace(sc.xbc.data(), static_cast<std::size_t>(T) * conv, st);
      }
      mark(pf, StepPart::MambaSsd, st);
      cuda::ssd_dt(sc.zx.data() + I + conv, proj, T, Hm, L.dt_bias.data(), static_cast<float>(m2.time_step_min_limit),
                   static_cast<float>(m2.time_step_max_limit), sc.dt.data(), st);
      cuda::ssd_scan(mamba_shape(), grid, ps, sc.xbc.data(), conv, sc.dt.data(), L.A.data(), L.D.data(),
                     ds.ssd(L.ordinal), sc.ssd.data(), sc.ssd.size(), sc.y.data(), st);
      mark(pf, StepPart::MambaNorm, st);
      cuda::gated_rmsnorm(sc.y.data(), sc.zx.data(), proj, T, I, I / m2.n_groups, L.gate_norm.data(),
                          static_cast<float>(m2.layer_norm_epsilon), m2.norm_before_gate, sc.g.data(), st);
      probe(nm.norm, sc.g.data(), T, I, I);
      mark(pf, StepPart::MambaGemm, st);
      gemm(sc.g.data(), T, I, L.out_proj, H, L.out_proj_bias, sc.out.data(), st);
      rank_.sum(sc.out.data(), TD, st);  // out_proj by rows: each rank's is a partial sum
    } else {
      const int nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
      const int qd = c.q_dim(), kvd = c.kv_dim();
      mark(pf, StepPart::AttnProj, st);
      gemm(sc.normed.data(), T, H, L.q, qd, L.q_bias, sc.q.data(), st);
      gemm(sc.normed.data(), T, H, L.k, kvd, L.k_bias, sc.k.data(), st);
      gemm(sc.normed.data(), T, H, L.v, kvd, L.v_bias, sc.v.data(), st);
      probe(nm.q, sc.q.data(), T, qd, qd);
      probe(nm.k, sc.k.data(), T, kvd, kvd);
      probe(nm.v, sc.v.data(), T, kvd, kvd);
      mark(pf, StepPart::AttnCore, st);
      if (c.use_rope) {
        cuda::rope(sc.q.data(), qd, nq, hd, ps, inv_freq_.data(), st);
        cuda::rope(sc.k.data(), kvd, nkv, hd, ps, inv_freq_.data(), st);
      }
      // Every key of the pass is in the cache before any query reads it (the CPU's order).
      float* kc = ds.k_cache(L.ordinal);
      float* vc = ds.v_cache(L.ordinal);
      cuda::kv_write(ap.layout, kc, vc, ap.tables, ps, sc.k.data(), sc.v.data(), kvd, st);
      cuda::attention(ap.layout, nq, static_cast<float>(c.attention_multiplier), sc.q.data(), qd, ps, ap.tables, kc,
                      vc, sc.attn.data(), qd, st, ap.work);
      mark(pf, StepPart::AttnProj, st);
      gemm(sc.attn.data(), T, qd, L.o, H, L.o_bias, sc.out.data(), st);
      rank_.sum(sc.out.data(), TD, st);  // o_proj by rows: each rank's is a partial sum
    }
    mark(pf, StepPart::Other, st);
    probe(nm.mixer, sc.out.data(), T, H, H);
    cuda::add_scaled_inplace(sc.resid.data(), sc.out.data(), res_mult, TD, st);
    cuda::rmsnorm(sc.resid.data(), T, H, L.post_norm.data(), eps, sc.normed.data(), st);

    // Feed-forward: the MoE (into ffn), the shared MLP (into out), out = out + ffn.
    if (c.has_experts()) {
      const int Ex = c.num_local_experts, K = c.num_experts_per_tok, F = c.intermediate_size;
      // The router point asks for a replacement first; without one the logits are computed and
      // visited (a capture, or an in-place edit), as granite_moe_forward on the CPU.
      mark(pf, StepPart::Moe, st);
      if (!probe.fetch_replacement(nm.router, sc.logits_r.data(), T, Ex, Ex)) {
        gemm(sc.normed.data(), T, H, L.router, Ex, no_bias, sc.logits_r.data(), st);
        probe(nm.router, sc.logits_r.data(), T, Ex, Ex);
      }
      const cuda::MoeWeights w{fp32_ ? static_cast<const void*>(L.experts_in_f32.data()) : L.experts_in_bf16.data(),
                               fp32_ ? static_cast<const void*>(L.experts_out_f32.data()) : L.experts_out_bf16.data(),
                               fp32_ ? cuda::WeightType::F32 : cuda::WeightType::BF16, Ex, H, F};
      // The logits, computed or replaced, go through the pattern's own routing: Direct makes (ids,
      // gates) lists, Fused dense affinities [T][E] that the experts read back (the same bits).
      if (moe_routing_ == model::MoeRoutingPattern::Fused) {
        cuda::dense_routing(sc.logits_r.data(), T, Ex, K, sc.idx.data(), sc.dense.data(), st);
        cuda::moe_experts_dense(w, sc.normed.data(), T, K, sc.dense.data(), sc.idx.data(), sc.moe, sc.ffn.data(), st);
      } else {
        cuda::router_topk_softmax(sc.logits_r.data(), T, Ex, K, sc.idx.data(), sc.gates.data(), st);
        cuda::moe_experts(w, sc.normed.data(), T, K, sc.idx.data(), sc.gates.data(), sc.moe, sc.ffn.data(), st);
      }
      rank_.sum(sc.ffn.data(), TD, st);  // every expert's down projection by rows: partial sums
      probe(nm.moe, sc.ffn.data(), T, H, H);
    }
    const int S = c.shared_intermediate_size;
    mark(pf, StepPart::SharedMlp, st);
    gemm(sc.normed.data(), T, H, L.shared_in, 2 * S, no_bias, sc.gu.data(), st);
    cuda::swiglu(sc.gu.data(), T, S, sc.act.data(), st);
    gemm(sc.act.data(), T, S, L.shared_out, H, no_bias, sc.out.data(), st);
    rank_.sum(sc.out.data(), TD, st);  // the shared MLP's down projection by rows: a partial sum
    probe(nm.shared, sc.out.data(), T, H, H);
    mark(pf, StepPart::Other, st);
    if (c.has_experts()) cuda::add_inplace(sc.out.data(), sc.ffn.data(), TD, st);  // moe + shared: one rounded add
    cuda::add_scaled_inplace(sc.resid.data(), sc.out.data(), res_mult, TD, st);
    probe(nm.layer, sc.resid.data(), T, H, H);
  }
}

void CudaHybridModel::enqueue_head(Scratch& sc, const float* x, int rows, const DeviceProbe& probe,
                                   cudaStream_t st) const {
  const io::GraniteHybridConfig& c = cfg_;
  const int H = c.hidden_size, V = c.vocab_size;
  const cuda::DeviceBuffer<float> no_bias;
  cuda::rmsnorm(x, rows, H, norm_.data(), static_cast<float>(c.rms_norm_eps), sc.head.data(), st);
  probe("model.norm", sc.head.data(), rows, H, H);
  gemm(sc.head.data(), rows, H, c.tie_word_embeddings ? embed_ : lm_head_, V, no_bias, sc.logits.data(), st);
  // logits_scaling is a divisor in HF (logits / logits_scaling), not a multiplier by its inverse.
  cuda::divide_inplace(sc.logits.data(), static_cast<float>(c.logits_scaling), static_cast<std::size_t>(rows) * V, st);
  probe("lm_head", sc.logits.data(), rows, V, V);
}

}  // namespace parity::backend_cuda
