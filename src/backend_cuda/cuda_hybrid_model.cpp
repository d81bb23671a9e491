#include "backend_cuda/cuda_hybrid_model.h"

#include <algorithm>
#include <string>

#include "backend_cuda/device_guard.h"
#include "backend_cuda/device_state.h"
#include "common/error.h"
#include "kernels/attention.h"
#include "kernels_cuda/attention.h"
#include "kernels_cuda/conv_epilogue.h"
#include "kernels_cuda/gated_a.h"
#include "kernels_cuda/moe_dense.h"
#include "kernels_cuda/pass_plan.h"
#include "model/weight_loading.h"

namespace parity::backend_cuda {
using io::GraniteLayerType;

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
  m->mixer_ = CudaMambaMixer(mamba, opt.fp32);
  if (c.hidden_act != "silu") throw Error(ck.origin + ": hidden_act '" + c.hidden_act + "' (the GPU runs silu)");
  if (n_attn > 0 && c.head_dim % 2 != 0) throw Error(ck.origin + ": head_dim must be even");
  m->spec_.num_mamba_layers = n_mamba;
  m->spec_.mamba = mamba;
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
  upload_weight(fp32, model::need_floats(ck, "model.embed_tokens.weight", {V, H}), static_cast<int>(V), m->embed_);
  m->head_ = CudaLmHead(ck, {"model.norm.weight", "model.norm"}, c.hidden_size, c.vocab_size,
                        static_cast<float>(c.rms_norm_eps), static_cast<float>(c.logits_scaling), c.tie_word_embeddings,
                        fp32);

  int mamba_seen = 0, attn_seen = 0;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    Layer L;
    L.mamba = c.layer_types[static_cast<std::size_t>(l)] == GraniteLayerType::Mamba;
    L.ordinal = L.mamba ? mamba_seen++ : attn_seen++;
    upload_f32(L.input_norm, model::need_floats(ck, p + ".input_layernorm.weight", {H}));
    upload_f32(L.post_norm, model::need_floats(ck, p + ".post_attention_layernorm.weight", {H}));
    const std::string mx = p + ".mamba.", a = p + ".self_attn.";
    if (L.mamba) {
      m->mixer_.add_layer(ck, mx);
    } else {
      const int64_t q = c.q_dim(), kv = c.kv_dim();
      upload_weight(fp32, model::need_floats(ck, a + "q_proj.weight", {q, H}), static_cast<int>(q), L.q);
      upload_weight(fp32, model::need_floats(ck, a + "k_proj.weight", {kv, H}), static_cast<int>(kv), L.k);
      upload_weight(fp32, model::need_floats(ck, a + "v_proj.weight", {kv, H}), static_cast<int>(kv), L.v);
      upload_weight(fp32, model::need_floats(ck, a + "o_proj.weight", {H, q}), static_cast<int>(H), L.o);
      if (c.attention_bias) {
        upload_f32(L.q_bias, model::need_floats(ck, a + "q_proj.bias", {q}));
        upload_f32(L.k_bias, model::need_floats(ck, a + "k_proj.bias", {kv}));
        upload_f32(L.v_bias, model::need_floats(ck, a + "v_proj.bias", {kv}));
        upload_f32(L.o_bias, model::need_floats(ck, a + "o_proj.bias", {H}));
      }
    }
    const std::string moe = p + ".block_sparse_moe.";
    if (c.has_experts()) {
      const int64_t Ex = c.num_local_experts, F = c.intermediate_size;
      upload_weight(fp32, model::need_floats(ck, moe + "router.layer.weight", {Ex, H}), static_cast<int>(Ex), L.router);
      // Stacked experts: expert e's matrix starts at e · rows · cols, unpadded (moe.cu).
      const std::vector<float> in = model::need_floats(ck, moe + "input_linear.weight", {Ex, 2 * F, H});
      const std::vector<float> out = model::need_floats(ck, moe + "output_linear.weight", {Ex, H, F});
      if (fp32) {
        L.experts_in_f32.upload(in);
        L.experts_out_f32.upload(out);
      } else {
        L.experts_in_bf16.upload(to_bf16(in));
        L.experts_out_bf16.upload(to_bf16(out));
      }
    }
    const int64_t S = c.shared_intermediate_size;
    upload_weight(fp32, model::need_floats(ck, p + ".shared_mlp.input_linear.weight", {2 * S, H}), static_cast<int>(2 * S),
                  L.shared_in);
    upload_weight(fp32, model::need_floats(ck, p + ".shared_mlp.output_linear.weight", {H, S}), static_cast<int>(H), L.shared_out);
    m->layers_.push_back(std::move(L));
    m->names_.push_back({p, m->layers_.back().mamba ? p + ".mamba" : p + ".self_attn", a + "q_proj", a + "k_proj",
                         a + "v_proj", moe + "router", p + ".block_sparse_moe", p + ".shared_mlp"});
  }
  for (const model::ProbePoint& pp : m->probe_points()) m->probe_names_.push_back(pp.name);
  m->enforce_eager_ = opt.enforce_eager;
  m->moe_routing_ = opt.moe_routing;
  m->run_ = std::make_unique<Run>();
  wait_for_uploads();
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
      for (model::ProbePoint& q : mixer_.probe_points(layers_[static_cast<std::size_t>(l)].ordinal))
        p.push_back(std::move(q));
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

void CudaHybridModel::reserve(Scratch& sc, int T, int R, bool probe_head) const {
  const io::GraniteHybridConfig& c = cfg_;
  const std::size_t t = static_cast<std::size_t>(T), H = c.hidden_size;
  sc.resid.resize(t * H);
  sc.normed.resize(t * H);
  sc.normed16.resize(t * H);
  sc.act16.resize(t * static_cast<std::size_t>(c.shared_intermediate_size));
  sc.out.resize(t * H);
  sc.ffn.resize(t * H);
  if (spec_.num_mamba_layers > 0) mixer_.reserve(sc.mamba, T);
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
  head_.reserve(sc.head, T, R, probe_head);
}

void CudaHybridModel::forward(const model::ForwardBatch& b, cache::ModelCache& mc, model::ScanMode mode,
                              float* logits, model::ProbeHooks* hooks) const {
  model::validate_batch(*this, b, mc, mode);
  DeviceGuard on(rank_.device);
  const cuda::ScanGrid grid =
      rank_grid(scan_grid_of(mode, mc.options().mamba, kCudaPlainCell), mixer_.config().num_heads, rank_);
  DeviceState& ds = device_state_of(mc, mixer_.config(), grid.exact ? grid.cell : 0, !enforce_eager_, rank_.rank);
  bool graph =
      !enforce_eager_ && !profile_ && ds.scratch && is_pure_decode(b) && !any_probe_wanted(hooks, probe_names_);
  if (graph && mc.kv()) {
    // Few decode rows over long contexts run attention_split.cu's kernels, whose grid follows the
    // context: such a pass stays eager (the row kernel a graph uses would give the same bits, slower).
    graph = cuda::AttnPlan(seq_spans(b), cfg_.num_attention_heads).num_long() == 0;
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

  const std::vector<cuda::SeqSpan> spans = seq_spans(b);
  const cuda::PassPlan plan(spans, grid, b.tokens, b.logit_rows);
  const cuda::PassSeqs ps = sc.in.upload(plan, st);
  const int32_t* di = sc.in.ints.data();
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
  const bool probe_head = head_.probed(probe);
  reserve(sc, T, R, probe_head);
  if (spec_.num_mamba_layers > 0) mixer_.reserve_scan(sc.mamba, ps, grid);
  enqueue_layers(sc, ps, di + plan.tokens_offset(), T, ds, grid, ap, probe, st);
  const float* out = head_.enqueue_logit_rows(embed_, sc.resid.data(), T, di + plan.extra_offset(), R, probe_head,
                                              sc.head, probe, b, st);
  if (profile_) profile_->finish(st);
  copy_logits_to_host(out, R, cfg_.vocab_size, logits, st);
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
    reserve(sc, bucket, bucket, false);
    sc.in.reserve_decode(bucket);
    run.graph_rows = bucket;
  }
  const cuda::PassSeqs ps = sc.in.upload(plan, st);
  if (spec_.num_mamba_layers > 0) mixer_.reserve_scan(sc.mamba, ps, grid);
  const int32_t* tokens = sc.in.ints.data() + plan.tokens_offset();

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

  const GraphEpoch epoch{ds.id, run.graph_rows,
                         {sc.in.ints.data(), sc.in.starts.data(), sc.mamba.scan.data(), sc.tables.data()}};
  const GraphKey key{bucket, grid.exact, grid.cell, grid.stagger, ps.num_cell_tasks, ap.tables.stride,
                     fuse_, cuda::programmatic_launch(), cuda::gemm_early(),
                     cuda::programmatic_exact_decode_mode(), cuda::conv_epilogue(),
                     cuda::gated_out_proj(), cuda::gate_in_conv(), 0};
  const cuda::GraphExec& g = run.graphs.get(epoch, key, st, [&] {
    const DeviceProbe none(nullptr, b, st);
    enqueue_layers(sc, ps, tokens, bucket, ds, grid, ap, none, st);
    head_.enqueue(embed_, sc.resid.data(), bucket, sc.head, none, st);
  });
  g.launch(st);
  run.graphs.note_replay();
  copy_logit_rows(sc.head.logits.data(), cfg_.vocab_size, b.logit_rows, logits, st);
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
  embed_rows(embed_, tokens, T, H, sc.resid.data(), st);
  probe("model.embed_tokens", sc.resid.data(), T, H, H);
  cuda::scale_inplace(sc.resid.data(), static_cast<float>(c.embedding_multiplier), TD, st);

  const MambaPass mp{ds, ps, grid, rank_, probe, pf, sc.mamba, st, fuse_, 0};
  const cuda::DeviceBuffer<float> no_bias;
  // Fused, the norms do the residual adds before them and write the GEMMs' bf16 input beside the fp32
  // one; a layer's last add waits for the next layer's input norm unless a probe of the layer's output
  // (which may replace it) wants it where the unfused pass has it.
  const uint16_t* n16 = fuse_ ? sc.normed16.data() : nullptr;
  auto norm = [&](const float* add, const float* add2, const cuda::DeviceBuffer<float>& w) {
    if (fuse_) cuda::add_rmsnorm(sc.resid.data(), {add, res_mult, true, add2}, T, H, w.data(), eps, sc.normed.data(),
                                 sc.normed16.data(), st);
    else cuda::rmsnorm(sc.resid.data(), T, H, w.data(), eps, sc.normed.data(), st);
  };
  // The previous layer's feed-forward output (shared MLP, and MoE when there is one), not yet added.
  const float* pending = nullptr;
  const float* pending2 = nullptr;
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& L = layers_[static_cast<std::size_t>(l)];
    const Names& nm = names_[static_cast<std::size_t>(l)];
    norm(pending, pending2, L.input_norm);
    if (L.mamba) {
      mixer_.enqueue(L.ordinal, sc.normed.data(), n16, T, sc.out.data(), mp);
    } else {
      const int nq = c.num_attention_heads, nkv = c.num_key_value_heads, hd = c.head_dim;
      const int qd = c.q_dim(), kvd = c.kv_dim();
      mark(pf, StepPart::AttnProj, st);
      gemm(sc.normed.data(), n16, T, H, L.q, qd, L.q_bias, sc.q.data(), st);
      gemm(sc.normed.data(), n16, T, H, L.k, kvd, L.k_bias, sc.k.data(), st);
      gemm(sc.normed.data(), n16, T, H, L.v, kvd, L.v_bias, sc.v.data(), st);
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
    if (!fuse_) cuda::add_scaled_inplace(sc.resid.data(), sc.out.data(), res_mult, TD, st);
    norm(fuse_ ? sc.out.data() : nullptr, nullptr, L.post_norm);

    // Feed-forward: the MoE (into ffn), the shared MLP (into out), out = out + ffn.
    if (c.has_experts()) {
      const int Ex = c.num_local_experts, K = c.num_experts_per_tok, F = c.intermediate_size;
      // The router point asks for a replacement first; without one the logits are computed and
      // visited (a capture, or an in-place edit), as granite_moe_forward on the CPU.
      mark(pf, StepPart::Moe, st);
      if (!probe.fetch_replacement(nm.router, sc.logits_r.data(), T, Ex, Ex)) {
        gemm(sc.normed.data(), n16, T, H, L.router, Ex, no_bias, sc.logits_r.data(), st);
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
    gemm(sc.normed.data(), n16, T, H, L.shared_in, 2 * S, no_bias, sc.gu.data(), st);
    cuda::swiglu(sc.gu.data(), T, S, sc.act.data(), st, fuse_ ? sc.act16.data() : nullptr);
    gemm(sc.act.data(), fuse_ ? sc.act16.data() : nullptr, T, S, L.shared_out, H, no_bias, sc.out.data(), st);
    rank_.sum(sc.out.data(), TD, st);  // the shared MLP's down projection by rows: a partial sum
    probe(nm.shared, sc.out.data(), T, H, H);
    mark(pf, StepPart::Other, st);
    // moe + shared: one rounded add, then the scaled residual add (fused: both in the next input norm).
    pending = sc.out.data();
    pending2 = c.has_experts() ? sc.ffn.data() : nullptr;
    if (!fuse_ || probe.wants(nm.layer) || l + 1 == c.num_hidden_layers) {
      if (pending2) cuda::add_inplace(sc.out.data(), pending2, TD, st);
      cuda::add_scaled_inplace(sc.resid.data(), pending, res_mult, TD, st);
      pending = pending2 = nullptr;
    }
    probe(nm.layer, sc.resid.data(), T, H, H);
  }
}

}  // namespace parity::backend_cuda
