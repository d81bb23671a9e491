#include "backend_cuda/cuda_mamba2_model.h"

#include <optional>
#include <string>

#include "backend_cuda/device_guard.h"
#include "backend_cuda/device_state.h"
#include "kernels_cuda/conv_epilogue.h"
#include "kernels_cuda/gated_a.h"
#include "kernels_cuda/pass_plan.h"
#include "common/error.h"
#include "model/mamba2_model.h"
#include "model/weight_loading.h"

namespace parity::backend_cuda {

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
  m->spec_.num_mamba_layers = c.num_hidden_layers;
  m->spec_.mamba = c;
  m->spec_.chunk_size = c.chunk_size;
  m->spec_.state_on_device = true;
  const int64_t D = c.hidden_size, V = c.vocab_size;
  if (c.intermediate_size != c.num_heads * c.head_dim)
    throw Error(ck.origin + ": intermediate_size must be heads × head_dim");

  const std::string emb = ck.find("backbone.embeddings.weight") ? "backbone.embeddings.weight" : "backbone.embedding.weight";
  upload_weight(opt.fp32, model::widen(model::need_tensor(ck, emb, {V, D})), static_cast<int>(V), m->embed_);
  m->head_ = CudaLmHead(ck, {"backbone.norm_f.weight", "backbone.norm_f"}, c.hidden_size, c.vocab_size,
                        static_cast<float>(c.layer_norm_epsilon), std::nullopt, c.tie_word_embeddings, opt.fp32);
  m->mixer_ = CudaMambaMixer(c, opt.fp32);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string b = "backbone.layers." + std::to_string(l);
    m->norms_.emplace_back();
    upload_f32(m->norms_.back(), model::widen(model::need_tensor(ck, b + ".norm.weight", {D})));
    m->mixer_.add_layer(ck, b + ".mixer.");
    m->names_.push_back({b + ".mixer", b});
  }
  for (const model::ProbePoint& pp : m->probe_points()) m->probe_names_.push_back(pp.name);
  m->enforce_eager_ = opt.enforce_eager;
  m->run_ = std::make_unique<Run>();
  wait_for_uploads();
  return m;
}

std::vector<model::ProbePoint> CudaMamba2Model::probe_points() const { return model::mamba2_probe_points(cfg_); }

void CudaMamba2Model::reserve(Scratch& sc, int T, int R, bool probe_head) const {
  const std::size_t TD = static_cast<std::size_t>(T) * cfg_.hidden_size;
  sc.resid.resize(TD);
  sc.normed.resize(TD);
  sc.normed16.resize(TD);
  sc.out.resize(TD);
  mixer_.reserve(sc.mamba, T);
  head_.reserve(sc.head, T, R, probe_head);
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

  const std::vector<cuda::SeqSpan> spans = seq_spans(b);
  const cuda::PassPlan plan(spans, grid, b.tokens, b.logit_rows);
  const cuda::PassSeqs ps = sc.in.upload(plan, st);
  const int32_t* di = sc.in.ints.data();
  if (plan.num_new_slots() > 0) ds.zero_slots(di + plan.new_slots_offset(), plan.num_new_slots(), st);

  const DeviceProbe probe(hooks, b, st);
  const bool probe_head = head_.probed(probe);
  reserve(sc, T, R, probe_head);
  mixer_.reserve_scan(sc.mamba, ps, grid);
  enqueue_layers(sc, ps, di + plan.tokens_offset(), T, ds, grid, probe, st);
  const float* out = head_.enqueue_logit_rows(embed_, sc.resid.data(), T, di + plan.extra_offset(), R, probe_head,
                                              sc.head, probe, b, st);
  if (profile_) profile_->finish(st);
  copy_logits_to_host(out, R, cfg_.vocab_size, logits, st);
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
    reserve(sc, bucket, bucket, false);
    sc.in.reserve_decode(bucket);
    run.graph_rows = bucket;
  }
  const cuda::PassSeqs ps = sc.in.upload(plan, st);
  mixer_.reserve_scan(sc.mamba, ps, grid);
  const int32_t* tokens = sc.in.ints.data() + plan.tokens_offset();
  const GraphEpoch epoch{ds.id, run.graph_rows, {sc.in.ints.data(), sc.in.starts.data(), sc.mamba.scan.data()}};
  const int persistent = bucket == 1 && takes_persistent(ds, grid) ? cuda::persistent_decode() : cuda::kPersistentOff;
  const GraphKey key{bucket, grid.exact, grid.cell, grid.stagger, ps.num_cell_tasks, 0,
                     fuse_, cuda::programmatic_launch(), cuda::gemm_early(),
                     cuda::programmatic_exact_decode_mode(), cuda::conv_epilogue(),
                     cuda::gated_out_proj(), cuda::gate_in_conv(), skip_, persistent};
  const cuda::GraphExec& g = run.graphs.get(epoch, key, st, [&] {
    const DeviceProbe none(nullptr, b, st);
    if (persistent) enqueue_persistent(sc, ps, grid, tokens, ds, st);
    else enqueue_layers(sc, ps, tokens, bucket, ds, grid, none, st);
    if (!(skip_ & kSkipHead)) head_.enqueue(embed_, sc.resid.data(), bucket, sc.head, none, st);
  });
  g.launch(st);
  run.graphs.note_replay();
  if (persistent) run.graphs.note_persistent();
  copy_logit_rows(sc.head.logits.data(), cfg_.vocab_size, b.logit_rows, logits, st);
  run.stream.sync("forward (CUDA graph)");
}

cuda::PersistentDecodeShape CudaMamba2Model::persistent_shape(const DeviceState& ds) const {
  cuda::PersistentDecodeShape s;
  s.layers = cfg_.num_hidden_layers;
  s.hidden = cfg_.hidden_size;
  s.heads = cfg_.num_heads;
  s.head_dim = cfg_.head_dim;
  s.state = cfg_.state_size;
  s.groups = cfg_.n_groups;
  s.conv_kernel = cfg_.conv_kernel;
  s.eps = static_cast<float>(cfg_.layer_norm_epsilon);
  s.dt_lo = static_cast<float>(cfg_.time_step_min_limit);
  s.dt_hi = static_cast<float>(cfg_.time_step_max_limit);
  s.norm_before_gate = cfg_.norm_before_gate;
  s.bf16_state = ds.bf16;
  s.exact = ds.exact;
  s.cell = ds.cell;
  return s;
}

bool CudaMamba2Model::takes_persistent(DeviceState& ds, const cuda::ScanGrid& grid) const {
  if (cuda::persistent_decode() == cuda::kPersistentOff || rank_.size != 1 || !fuse_ || skip_ != 0 ||
      !mixer_.bf16_weights())
    return false;
  if (grid.exact != ds.exact || (grid.exact && grid.cell != ds.cell)) return false;  // the table's grid
  if (grid.products != kernels::ScanProducts::float32) return false;  // its decode forms fp32 products
  Run& run = *run_;
  if (!run.persistent_made || run.persistent_state != ds.id) {
    const cuda::PersistentDecodeShape shape = persistent_shape(ds);
    run.persistent_unfit = cuda::persistent_decode_unfit(shape);
    if (run.persistent_unfit.empty()) {
      std::vector<cuda::PersistentMambaLayer> table;
      for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
        table.push_back(mixer_.persistent_layer(l, ds));
        table.back().norm_w = norms_[static_cast<std::size_t>(l)].data();
        cuda::persistent_layer_maps(table.back(), shape);
      }
      run.persistent_table.upload(table);
      run.persistent_barrier.resize(1);
    }
    run.persistent_made = true;
    run.persistent_state = ds.id;
  }
  if (run.persistent_unfit.empty() && (cuda::persistent_decode() & cuda::kPersistentTrace))
    cuda::persistent_trace_buffer(cfg_.num_hidden_layers);  // allocated here, not in the graph's capture
  return run.persistent_unfit.empty();
}

void CudaMamba2Model::enqueue_persistent(Scratch& sc, const cuda::PassSeqs& ps, const cuda::ScanGrid& grid,
                                         const int32_t* tokens, const DeviceState& ds, cudaStream_t st) const {
  Run& run = *run_;
  embed_rows(embed_, tokens, 1, cfg_.hidden_size, sc.resid.data(), st);
  cuda::PersistentDecode job;
  job.shape = persistent_shape(ds);
  job.layers = run.persistent_table.data();
  job.ps = ps;
  job.grid = grid;
  job.resid = sc.resid.data();
  job.zx = sc.mamba.zx.data();
  job.xbc = sc.mamba.xbc.data();
  job.dt = sc.mamba.dt.data();
  job.y = sc.mamba.y.data();
  job.out = sc.out.data();
  job.barrier = run.persistent_barrier.data();
  const int mode = cuda::persistent_decode();
  job.next_l2 = cuda::persistent_mode_of(mode) == cuda::kPersistentNextL2;
  job.small_l2 = (mode & cuda::kPersistentSmallL2) != 0;
  job.weights_evict_first = (mode & cuda::kPersistentEvictFirst) != 0;
  if (mode & cuda::kPersistentTrace) job.trace = cuda::persistent_trace_buffer(cfg_.num_hidden_layers);
  cuda::persistent_decode_step(job, st);
}

void CudaMamba2Model::enqueue_layers(Scratch& sc, const cuda::PassSeqs& ps, const int32_t* tokens, int T,
                                     DeviceState& ds, const cuda::ScanGrid& grid, const DeviceProbe& probe,
                                     cudaStream_t st) const {
  const int D = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.layer_norm_epsilon);
  const std::size_t TD = static_cast<std::size_t>(T) * D;

  StepProfile* const pf = profile_;
  mark(pf, StepPart::Other, st);
  embed_rows(embed_, tokens, T, D, sc.resid.data(), st);
  probe("backbone.embeddings", sc.resid.data(), T, D, D);

  const MambaPass mp{ds, ps, grid, rank_, probe, pf, sc.mamba, st, fuse_, skip_};
  // Fused, a layer's residual add waits for the next layer's norm, which does it in its own launch and
  // writes in_proj's bf16 input beside the fp32 one. A probe of the block's output (which may replace
  // it) takes the add where the unfused pass has it; the mixer output's is visited before either.
  const float* pending = nullptr;  // the previous layer's mixer output, not yet added
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const Names& nm = names_[static_cast<std::size_t>(l)];
    const float* w = norms_[static_cast<std::size_t>(l)].data();
    const bool norm = !(skip_ & kSkipNorm);
    // A prefill pass's in_proj reads only the bf16 copy: the fp32 output is then not written.
    const bool copy_only = fuse_ && mixer_.in_proj_reads_copy_only(l, sc.normed.data(), sc.normed16.data(), T);
    if (norm && fuse_)
      cuda::add_rmsnorm(sc.resid.data(), {pending}, T, D, w, eps, copy_only ? nullptr : sc.normed.data(),
                        sc.normed16.data(), st);
    else if (norm)
      cuda::rmsnorm(sc.resid.data(), T, D, w, eps, sc.normed.data(), st);
    mixer_.enqueue(l, sc.normed.data(), fuse_ ? sc.normed16.data() : nullptr, T, sc.out.data(), mp);
    mark(pf, StepPart::Other, st);
    probe(nm.mixer, sc.out.data(), T, D, D);
    pending = sc.out.data();
    if (!fuse_ || probe.wants(nm.block) || l + 1 == cfg_.num_hidden_layers) {
      cuda::add_inplace(sc.resid.data(), pending, TD, st);
      pending = nullptr;
    }
    probe(nm.block, sc.resid.data(), T, D, D);
  }
}

}  // namespace parity::backend_cuda
