#include "backend_cuda/cuda_mamba2_model.h"

#include <cstring>
#include <string>

#include "backend_cuda/device_guard.h"
#include "backend_cuda/device_state.h"
#include "kernels_cuda/pass_plan.h"
#include "common/error.h"
#include "kernels/math.h"
#include "model/mamba2_model.h"
#include "model/weight_loading.h"

namespace parity::backend_cuda {
namespace {

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}

void upload_f32(cuda::DeviceBuffer<float>& d, const std::vector<float>& v) {
  if (!v.empty()) d.upload(v);
}

// A GEMM weight [rows][k] in the form the run computes with: bf16 for tensor cores (zero rows up to
// a whole 16-row strip, gemm's w_rows: its tiles may read them), or fp32.
void upload_weight(bool fp32, const std::vector<float>& w, int64_t rows, cuda::DeviceBuffer<uint16_t>& b16,
                   cuda::DeviceBuffer<float>& f32) {
  if (fp32) {
    f32.upload(w);
    return;
  }
  std::vector<uint16_t> b = to_bf16(w);
  b.resize(static_cast<std::size_t>(cuda::padded_rows(static_cast<int>(rows))) * (w.size() / rows), 0);
  b16.upload(b);
}

}  // namespace

std::unique_ptr<CudaMamba2Model> CudaMamba2Model::load(const model::Checkpoint& ck, const CudaModelOptions& opt) {
  const std::string arch = io::architecture_of(ck.config);
  if (arch != "Mamba2ForCausalLM")
    throw Error(ck.origin + ": the CUDA backend runs Mamba2ForCausalLM and GraniteMoeHybridForCausalLM; '" + arch + "' runs with --device cpu");
  if (cuda::device_count() == 0) throw Error("--device cuda: " + describe_device());
  DeviceGuard on(0);
  return build(ck, io::parse_mamba2_config(ck.config), opt);
}

std::unique_ptr<CudaMamba2Model> CudaMamba2Model::load_rank(const model::Checkpoint& ck,
                                                            const io::Mamba2Config& rank_cfg,
                                                            const cache::ModelCacheSpec& cache, DeviceRank rank,
                                                            std::shared_ptr<DeviceCollective> collective,
                                                            const CudaModelOptions& opt) {
  DeviceGuard on(rank.device);
  auto m = build(ck, rank_cfg, opt);
  m->spec_ = cache;
  m->spec_.state_on_device = true;
  m->rank_ = rank;
  m->collective_ = std::move(collective);
  return m;
}

// The body runs before the members are destroyed: they free their memory and stream with the
// rank's device current.
CudaMamba2Model::~CudaMamba2Model() { cudaSetDevice(rank_.device); }

std::unique_ptr<CudaMamba2Model> CudaMamba2Model::build(const model::Checkpoint& ck, const io::Mamba2Config& c,
                                                        const CudaModelOptions& opt) {
  auto m = std::unique_ptr<CudaMamba2Model>(new CudaMamba2Model());
  m->cfg_ = c;
  m->origin_ = ck.origin;
  m->fp32_ = opt.fp32;
  m->spec_.num_mamba_layers = c.num_hidden_layers;
  m->spec_.mamba = c;
  m->spec_.chunk_size = c.chunk_size;
  m->spec_.state_on_device = true;
  const int64_t D = c.hidden_size, I = c.intermediate_size, H = c.num_heads, V = c.vocab_size;
  const int64_t conv = c.conv_dim(), proj = c.in_proj_dim(), K = c.conv_kernel;
  if (I != H * c.head_dim) throw Error(ck.origin + ": intermediate_size must be heads × head_dim");

  const std::string emb = ck.find("backbone.embeddings.weight") ? "backbone.embeddings.weight" : "backbone.embedding.weight";
  const std::vector<float> E = model::widen(model::need_tensor(ck, emb, {V, D}));
  if (opt.fp32) m->embed_f32_.upload(E);
  else upload_weight(false, E, V, m->embed_bf16_, m->embed_f32_);
  if (!c.tie_word_embeddings)
    upload_weight(opt.fp32, model::widen(model::need_tensor(ck, "lm_head.weight", {V, D})), V, m->lm_head_bf16_,
                  m->lm_head_f32_);
  upload_f32(m->norm_f_, model::widen(model::need_tensor(ck, "backbone.norm_f.weight", {D})));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string b = "backbone.layers." + std::to_string(l);
    const std::string p = b + ".mixer.";
    Layer L;
    upload_f32(L.norm, model::widen(model::need_tensor(ck, b + ".norm.weight", {D})));
    upload_weight(opt.fp32, model::widen(model::need_tensor(ck, p + "in_proj.weight", {proj, D})), proj, L.in_proj_bf16,
                  L.in_proj_f32);
    if (c.use_bias) upload_f32(L.in_proj_bias, model::widen(model::need_tensor(ck, p + "in_proj.bias", {proj})));
    upload_f32(L.conv_w, model::widen(model::need_tensor(ck, p + "conv1d.weight", {conv, 1, K})));
    if (c.use_conv_bias) upload_f32(L.conv_b, model::widen(model::need_tensor(ck, p + "conv1d.bias", {conv})));
    upload_f32(L.dt_bias, model::widen(model::need_tensor(ck, p + "dt_bias", {H})));
    std::vector<float> A = model::widen(model::need_tensor(ck, p + "A_log", {H}));
    for (float& a : A) a = -kernels::exp_f(a);  // as the CPU model: A = -exp(A_log)
    upload_f32(L.A, A);
    upload_f32(L.D, model::widen(model::need_tensor(ck, p + "D", {H})));
    upload_f32(L.gate_norm, model::widen(model::need_tensor(ck, p + "norm.weight", {I})));
    upload_weight(opt.fp32, model::widen(model::need_tensor(ck, p + "out_proj.weight", {D, I})), D, L.out_proj_bf16,
                  L.out_proj_f32);
    if (c.use_bias) upload_f32(L.out_proj_bias, model::widen(model::need_tensor(ck, p + "out_proj.bias", {D})));
    m->layers_.push_back(std::move(L));
    m->names_.push_back({p + "in_proj", p + "conv1d", p + "dt", p + "norm", b + ".mixer", b});
  }
  for (const model::ProbePoint& pp : m->probe_points()) m->probe_names_.push_back(pp.name);
  m->enforce_eager_ = opt.enforce_eager;
  m->run_ = std::make_unique<Run>();
  return m;
}

std::vector<model::ProbePoint> CudaMamba2Model::probe_points() const { return model::mamba2_probe_points(cfg_); }

void CudaMamba2Model::gemm(const float* A, int M, int K, const cuda::DeviceBuffer<uint16_t>& wb,
                           const cuda::DeviceBuffer<float>& wf, int N, const cuda::DeviceBuffer<float>& bias, float* C,
                           cudaStream_t st) const {
  const float* bp = bias.size() ? bias.data() : nullptr;
  if (fp32_) cuda::gemm(A, M, K, K, wf.data(), cuda::WeightType::F32, N, bp, C, N, st);
  else cuda::gemm(A, M, K, K, wb.data(), cuda::WeightType::BF16, N, bp, C, N, st, cuda::padded_rows(N));
}

void CudaMamba2Model::reserve(Scratch& sc, int T, int head_rows) const {
  const std::size_t t = static_cast<std::size_t>(T), D = cfg_.hidden_size, I = cfg_.intermediate_size;
  const std::size_t H = cfg_.num_heads;
  sc.resid.resize(t * D);
  sc.normed.resize(t * D);
  sc.out.resize(t * D);
  sc.zx.resize(t * cfg_.in_proj_dim());
  sc.xbc.resize(t * cfg_.conv_dim());
  sc.dt.resize(t * H);
  sc.y.resize(t * I);
  sc.g.resize(t * I);
  sc.head.resize(static_cast<std::size_t>(head_rows) * D);
  sc.logits.resize(static_cast<std::size_t>(head_rows) * cfg_.vocab_size);
}

void CudaMamba2Model::forward(const model::ForwardBatch& b, cache::ModelCache& mc, model::ScanMode mode, float* logits,
                              model::ProbeHooks* hooks) const {
  model::validate_batch(*this, b, mc, mode);
  DeviceGuard on(rank_.device);
  const cuda::ScanGrid grid = rank_grid(scan_grid_of(mode, mc.options().mamba, kCudaPlainCell), cfg_.num_heads, rank_);
  DeviceState& ds = device_state_of(mc, cfg_, grid.exact ? grid.cell : 0, !enforce_eager_, rank_.rank);
  const bool graph =
      !enforce_eager_ && !profile_ && ds.scratch && is_pure_decode(b) && !any_probe_wanted(hooks, probe_names_);
  const int bucket = graph ? graph_bucket(static_cast<int>(b.seqs.size())) : 0;
  if (bucket > 0) forward_graph(b, ds, grid, bucket, logits);
  else forward_eager(b, ds, grid, logits, hooks);
  if (rank_.size == 1)  // ranks share the positions: their caller advances them once
    for (const auto& q : b.seqs) mc.set_position(q.slot, q.start + q.n);
}

void CudaMamba2Model::forward_eager(const model::ForwardBatch& b, DeviceState& ds, const cuda::ScanGrid& grid,
                                    float* logits, model::ProbeHooks* hooks) const {
  Run& run = *run_;
  Scratch& sc = run.eager;
  const cudaStream_t st = run.stream.get();
  run.graphs.note_eager();
  const int T = static_cast<int>(b.tokens.size());
  const int R = static_cast<int>(b.logit_rows.size());
  const int D = cfg_.hidden_size, V = cfg_.vocab_size;

  std::vector<cuda::SeqSpan> spans;
  for (const auto& q : b.seqs) spans.push_back({q.slot, q.start, q.n});
  const cuda::PassPlan plan(spans, grid, b.tokens, b.logit_rows);
  const cuda::PassSeqs ps = plan.upload(sc.ints, sc.starts, sc.h_ints, sc.h_starts, st);
  const int32_t* di = sc.ints.data();
  if (plan.num_new_slots() > 0) ds.zero_slots(di + plan.new_slots_offset(), plan.num_new_slots(), st);

  const DeviceProbe probe(hooks, b, st);
  const bool probe_head = probe.wants("backbone.norm_f") || probe.wants("lm_head");
  reserve(sc, T, probe_head ? T : R);
  sc.ssd.resize(cuda::ssd_scratch_floats(shape(), ps, grid));
  if (probe_head) sc.out.resize(static_cast<std::size_t>(R) * V);  // before any launch: no buffer moves mid-pass
  enqueue_layers(sc, ps, di + plan.tokens_offset(), T, ds, grid, probe, st);
  const float* out = sc.logits.data();
  if (probe_head) {
    // Every row through the head (row-wise norm, M-invariant GEMM: the same bits per row).
    enqueue_head(sc, sc.resid.data(), T, probe, st);
    if (R > 0) {
      cuda::gather_rows(sc.logits.data(), V, di + plan.extra_offset(), R, V, sc.out.data(), st);
      out = sc.out.data();
    }
  } else if (R > 0) {
    cuda::gather_rows(sc.resid.data(), D, di + plan.extra_offset(), R, D, sc.head.data(), st);
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

void CudaMamba2Model::forward_graph(const model::ForwardBatch& b, DeviceState& ds, const cuda::ScanGrid& grid,
                                    int bucket, float* logits) const {
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
  sc.ssd.resize(cuda::ssd_scratch_floats(shape(), ps, grid));
  const int32_t* tokens = sc.ints.data() + plan.tokens_offset();
  const GraphEpoch epoch{ds.id, run.graph_rows, {sc.ints.data(), sc.starts.data(), sc.ssd.data()}};
  const GraphKey key{bucket, grid.exact, grid.cell, grid.stagger, ps.num_cell_tasks, 0};
  const cuda::GraphExec& g = run.graphs.get(epoch, key, st, [&] {
    const DeviceProbe none(nullptr, b, st);
    enqueue_layers(sc, ps, tokens, bucket, ds, grid, none, st);
    enqueue_head(sc, sc.resid.data(), bucket, none, st);
  });
  g.launch(st);
  run.graphs.note_replay();
  copy_logit_rows(sc.logits.data(), cfg_.vocab_size, b.logit_rows, logits, st);
  run.stream.sync("forward (CUDA graph)");
}

void CudaMamba2Model::enqueue_layers(Scratch& sc, const cuda::PassSeqs& ps, const int32_t* tokens, int T,
                                     DeviceState& ds, const cuda::ScanGrid& grid, const DeviceProbe& probe,
                                     cudaStream_t st) const {
  const int D = cfg_.hidden_size, I = cfg_.intermediate_size, H = cfg_.num_heads;
  const int conv = cfg_.conv_dim(), proj = cfg_.in_proj_dim(), K = cfg_.conv_kernel;
  const float eps = static_cast<float>(cfg_.layer_norm_epsilon);
  const std::size_t TD = static_cast<std::size_t>(T) * D;

  StepProfile* const pf = profile_;
  mark(pf, StepPart::Other, st);
  if (fp32_) cuda::gather_rows(embed_f32_.data(), D, tokens, T, D, sc.resid.data(), st);
  else cuda::embed_bf16(embed_bf16_.data(), tokens, T, D, sc.resid.data(), st);
  probe("backbone.embeddings", sc.resid.data(), T, D, D);

  const cuda::SsdShape sh = shape();
  const float lo = static_cast<float>(cfg_.time_step_min_limit), hi = static_cast<float>(cfg_.time_step_max_limit);
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const Layer& L = layers_[l];
    const Names& nm = names_[l];
    cuda::rmsnorm(sc.resid.data(), T, D, L.norm.data(), eps, sc.normed.data(), st);
    mark(pf, StepPart::MambaGemm, st);
    gemm(sc.normed.data(), T, D, L.in_proj_bf16, L.in_proj_f32, proj, L.in_proj_bias, sc.zx.data(), st);
    probe(nm.in_proj, sc.zx.data(), T, proj, proj);
    probe(nm.dt, sc.zx.data() + I + conv, T, H, proj);
    const bool probe_conv = probe.wants(nm.conv1d);
    mark(pf, StepPart::MambaConv, st);
    cuda::conv1d(sc.zx.data() + I, proj, conv, L.conv_w.data(), L.conv_b.size() ? L.conv_b.data() : nullptr, K,
                 ds.conv_state(l), ps, !probe_conv, sc.xbc.data(), st);
    if (probe_conv) {
      probe(nm.conv1d, sc.xbc.data(), T, conv, conv);
      cuda::silu_inplace(sc.xbc.data(), static_cast<std::size_t>(T) * conv, st);
    }
    mark(pf, StepPart::MambaSsd, st);
    cuda::ssd_dt(sc.zx.data() + I + conv, proj, T, H, L.dt_bias.data(), lo, hi, sc.dt.data(), st);
    cuda::ssd_scan(sh, grid, ps, sc.xbc.data(), conv, sc.dt.data(), L.A.data(), L.D.data(), ds.ssd(l), sc.ssd.data(),
                   sc.ssd.size(), sc.y.data(), st);
    mark(pf, StepPart::MambaNorm, st);
    cuda::gated_rmsnorm(sc.y.data(), sc.zx.data(), proj, T, I, I / cfg_.n_groups, L.gate_norm.data(), eps,
                        cfg_.norm_before_gate, sc.g.data(), st);
    probe(nm.norm, sc.g.data(), T, I, I);
    mark(pf, StepPart::MambaGemm, st);
    gemm(sc.g.data(), T, I, L.out_proj_bf16, L.out_proj_f32, D, L.out_proj_bias, sc.out.data(), st);
    rank_.sum(sc.out.data(), TD, st);  // a rank's out_proj holds its rows of the reduction: the ranks' sum
    mark(pf, StepPart::Other, st);
    probe(nm.mixer, sc.out.data(), T, D, D);
    cuda::add_inplace(sc.resid.data(), sc.out.data(), TD, st);
    probe(nm.block, sc.resid.data(), T, D, D);
  }
}

void CudaMamba2Model::enqueue_head(Scratch& sc, const float* x, int rows, const DeviceProbe& probe,
                                   cudaStream_t st) const {
  const int D = cfg_.hidden_size, V = cfg_.vocab_size;
  const bool tied = cfg_.tie_word_embeddings;
  const cuda::DeviceBuffer<float> no_bias;
  cuda::rmsnorm(x, rows, D, norm_f_.data(), static_cast<float>(cfg_.layer_norm_epsilon), sc.head.data(), st);
  probe("backbone.norm_f", sc.head.data(), rows, D, D);
  gemm(sc.head.data(), rows, D, tied ? embed_bf16_ : lm_head_bf16_, tied ? embed_f32_ : lm_head_f32_, V, no_bias,
       sc.logits.data(), st);
  probe("lm_head", sc.logits.data(), rows, V, V);
}

}  // namespace parity::backend_cuda
