#include "backend_cuda/cuda_mamba_mixer.h"

#include "backend_cuda/decode_graphs.h"
#include "cache/numerics.h"
#include "kernels/math.h"
#include "kernels_cuda/conv_epilogue.h"
#include "kernels_cuda/gated_a.h"
#include "kernels_cuda/ssd_tc.h"
#include "model/weight_loading.h"

namespace parity::backend_cuda {

void CudaMambaMixer::add_layer(const model::Checkpoint& ck, const std::string& p) {
  const io::Mamba2Config& c = cfg_;
  const int64_t hidden = c.hidden_size, I = c.intermediate_size, H = c.num_heads;
  const int64_t conv = c.conv_dim(), proj = c.in_proj_dim();
  Layer L;
  upload_weight(fp32_, model::need_floats(ck, p + "in_proj.weight", {proj, hidden}), static_cast<int>(proj), L.in_proj);
  if (c.use_bias) upload_f32(L.in_proj_bias, model::need_floats(ck, p + "in_proj.bias", {proj}));
  upload_f32(L.conv_w, model::need_floats(ck, p + "conv1d.weight", {conv, 1, c.conv_kernel}));
  if (c.use_conv_bias) upload_f32(L.conv_b, model::need_floats(ck, p + "conv1d.bias", {conv}));
  upload_f32(L.dt_bias, model::need_floats(ck, p + "dt_bias", {H}));
  std::vector<float> A = model::need_floats(ck, p + "A_log", {H});
  for (float& a : A) a = -kernels::exp_f(a);  // A = -exp(A_log), as the CPU mixer
  upload_f32(L.A, A);
  upload_f32(L.D, model::need_floats(ck, p + "D", {H}));
  upload_f32(L.gate_norm, model::need_floats(ck, p + "norm.weight", {I}));
  upload_weight(fp32_, model::need_floats(ck, p + "out_proj.weight", {hidden, I}), static_cast<int>(hidden), L.out_proj);
  if (c.use_bias) upload_f32(L.out_proj_bias, model::need_floats(ck, p + "out_proj.bias", {hidden}));
  L.names = {p + "in_proj", p + "conv1d", p + "dt", p + "norm"};
  layers_.push_back(std::move(L));
}

std::vector<model::ProbePoint> CudaMambaMixer::probe_points(int layer) const {
  const model::MixerProbeNames& n = layers_[static_cast<std::size_t>(layer)].names;
  return {{n.in_proj, cfg_.in_proj_dim(), "in_proj output [z | xBC | dt]"},
          {n.conv1d, cfg_.conv_dim(), "causal conv1d output over xBC, before SiLU"},
          {n.dt, cfg_.num_heads, "raw dt (before dt_bias, softplus and clamp)"},
          {n.norm, cfg_.intermediate_size, "gated RMSNorm output"}};
}

void CudaMambaMixer::reserve(MambaScratch& sc, int T) const {
  const std::size_t t = static_cast<std::size_t>(T);
  sc.zx.resize(t * cfg_.in_proj_dim());
  sc.xbc.resize(t * cfg_.conv_dim());
  sc.dt.resize(t * cfg_.num_heads);
  sc.y.resize(t * cfg_.intermediate_size);
  sc.g.resize(t * cfg_.intermediate_size);
  sc.g16.resize(t * cfg_.intermediate_size);
  sc.gate.resize(t * cfg_.intermediate_size);
}

std::string CudaMambaMixer::exact_refusal(const kernels::ExactGrid& grid) const {
  if (grid.products == kernels::ScanProducts::float32 || cfg_.num_heads == 0) return "";
  if (fp32_)
    return std::string("--scan-products ") + cache::scan_products_name(grid.products) +
           " goes with bf16 GEMM inputs: --dtype float32 is the accuracy path, whose scan forms fp32 products";
  cuda::ScanGrid g;
  g.exact = true;
  g.cell = grid.cell;
  g.stagger = grid.stagger;
  g.products = grid.products;
  return cuda::ssd_tc_refusal(shape(), g);
}

void CudaMambaMixer::reserve_scan(MambaScratch& sc, const cuda::PassSeqs& ps, const cuda::ScanGrid& grid) const {
  sc.scan.resize(cuda::ssd_scratch_floats(shape(), ps, grid));
}

cuda::PersistentMambaLayer CudaMambaMixer::persistent_layer(int layer, DeviceState& ds) const {
  const Layer& L = layers_[static_cast<std::size_t>(layer)];
  cuda::PersistentMambaLayer p;
  p.in_w = L.in_proj.bf16.data();
  p.in_b = L.in_proj_bias.size() ? L.in_proj_bias.data() : nullptr;
  p.conv_w = L.conv_w.data();
  p.conv_b = L.conv_b.size() ? L.conv_b.data() : nullptr;
  p.conv_state = ds.conv_state(layer);
  p.dt_bias = L.dt_bias.data();
  p.A = L.A.data();
  p.D = L.D.data();
  p.ssd = ds.ssd(layer);
  p.gate_w = L.gate_norm.data();
  p.out_w = L.out_proj.bf16.data();
  p.out_b = L.out_proj_bias.size() ? L.out_proj_bias.data() : nullptr;
  return p;
}

bool CudaMambaMixer::in_proj_reads_copy_only(int layer, const float* x, const uint16_t* x16, int T) const {
  const Layer& L = layers_[static_cast<std::size_t>(layer)];
  return gemm_reads_copy_only(x, x16, T, cfg_.hidden_size, L.in_proj, cfg_.in_proj_dim());
}

void CudaMambaMixer::enqueue(int layer, const float* x, const uint16_t* x16, int T, float* out,
                             const MambaPass& p) const {
  const io::Mamba2Config& c = cfg_;
  const Layer& L = layers_[static_cast<std::size_t>(layer)];
  const model::MixerProbeNames& nm = L.names;
  const int hidden = c.hidden_size, I = c.intermediate_size, H = c.num_heads;
  const int conv = c.conv_dim(), proj = c.in_proj_dim();
  MambaScratch& sc = p.sc;
  const cudaStream_t st = p.st;
  const float dt_lo = static_cast<float>(c.time_step_min_limit), dt_hi = static_cast<float>(c.time_step_max_limit);

  mark(p.profile, StepPart::MambaGemm, st);
  // The conv1d point is the conv's output before SiLU: when a hook wants it, the conv runs without its
  // fused SiLU and the SiLU runs after the visit (which may have replaced the tensor). The dt point
  // is visited after in_proj, so fused, the conv's launch computes dt from the raw dt as ssd_dt would.
  const bool probe_conv = p.probe.wants(nm.conv1d);
  const cuda::DtJob dt{sc.zx.data() + I + conv, proj, H, L.dt_bias.data(), dt_lo, dt_hi, sc.dt.data()};
  // A pass of one row per sequence (decode) may have in_proj's blocks do the conv and dt in their
  // epilogue (conv_epilogue.h: the same bits, one launch fewer), unless a probe wants a point between.
  const bool conv_in_gemm = p.fuse && p.ps.one_row_each && !L.in_proj.fp32 && !(p.skip & (kSkipInProj | kSkipConv)) &&
                            !probe_conv && !p.probe.wants(nm.in_proj) && !p.probe.wants(nm.dt);
  // The gated norm's factors silu(z) come from in_proj's z columns there too (as from the conv's launch).
  const bool gate_in_gemm = p.fuse && p.ps.one_row_each && cuda::gate_in_conv() && cuda::gate_in_epilogue();
  cuda::ConvEpilogue job{I, conv, c.conv_kernel, L.conv_w.data(), L.conv_b.size() ? L.conv_b.data() : nullptr,
                         p.ds.conv_state(layer), p.ps.slot, p.ps.row_seq, true, sc.xbc.data(), I + conv, dt};
  if (gate_in_gemm) {
    job.gate = sc.gate.data();
    job.gate_width = I;
  }
  bool conv_done = false;
  // in_proj's tail may ask L2 for out_proj's weights (ops.h's kGemmEarlyNextL2): they are read after
  // the conv, the SSD step and the gated norm, none of which needs much of DRAM.
  auto in_proj = [&] {
    cuda::with_l2_prefetch(L.out_proj.fp32 ? nullptr : L.out_proj.bf16.data(), L.out_proj.bf16.size() * 2,
                           [&] { gemm(x, x16, T, hidden, L.in_proj, proj, L.in_proj_bias, sc.zx.data(), st); });
  };
  if (conv_in_gemm) conv_done = cuda::with_conv_epilogue(job, in_proj);
  else if (!(p.skip & kSkipInProj)) in_proj();
  p.probe(nm.in_proj, sc.zx.data(), T, proj, proj);
  p.probe(nm.dt, sc.zx.data() + I + conv, T, H, proj);
  mark(p.profile, StepPart::MambaConv, st);
  // A decode pass's gated norm runs one block a row: the conv's launch evaluates its silu(z) instead
  // (GateJob; the same floats), unless the conv runs elsewhere or is left out.
  const bool gate_done = (conv_done && gate_in_gemm) ||
                         (p.fuse && p.ps.one_row_each && cuda::gate_in_conv() && !conv_done && !(p.skip & kSkipConv));
  const cuda::GateJob gate{sc.zx.data(), proj, I, sc.gate.data()};
  if (!(p.skip & kSkipConv) && !conv_done)
    cuda::conv1d(sc.zx.data() + I, proj, conv, L.conv_w.data(), L.conv_b.size() ? L.conv_b.data() : nullptr,
                 c.conv_kernel, p.ds.conv_state(layer), p.ps, !probe_conv, sc.xbc.data(), st, p.fuse ? &dt : nullptr,
                 gate_done ? &gate : nullptr);
  if (probe_conv) {
    p.probe(nm.conv1d, sc.xbc.data(), T, conv, conv);
    cuda::silu_inplace(sc.xbc.data(), static_cast<std::size_t>(T) * conv, st);
  }
  mark(p.profile, StepPart::MambaSsd, st);
  if (!p.fuse) cuda::ssd_dt(dt.raw, dt.ld, T, H, dt.bias, dt_lo, dt_hi, dt.dt, st);
  if (!(p.skip & kSkipSsm))
    cuda::ssd_scan(shape(), p.grid, p.ps, sc.xbc.data(), conv, sc.dt.data(), L.A.data(), L.D.data(),
                   p.ds.ssd(layer), sc.scan.data(), sc.scan.size(), sc.y.data(), st);
  mark(p.profile, StepPart::MambaNorm, st);
  // out_proj reads the norm's bf16 copy unless the norm point may replace the fp32 tensor.
  const bool g16 = p.fuse && !p.probe.wants(nm.norm);
  // One row: out_proj's blocks may run the norm themselves (gated_a.h: the same bits, one launch fewer).
  bool norm_done = false;
  if (g16 && T == 1 && c.n_groups == 1 && !L.out_proj.fp32 && !(p.skip & (kSkipGatedNorm | kSkipOutProj))) {
    const cuda::GatedA a{sc.y.data(), gate_done ? sc.gate.data() : sc.zx.data(), L.gate_norm.data(), I,
                         static_cast<float>(c.layer_norm_epsilon), c.norm_before_gate, gate_done};
    mark(p.profile, StepPart::MambaGemm, st);
    norm_done = cuda::gemm_bf16_gated_row(a, I, L.out_proj.bf16.data(), hidden,
                                          L.out_proj_bias.size() ? L.out_proj_bias.data() : nullptr, out, st);
  }
  if (!norm_done) {
    // A prefill pass's out_proj reads only the bf16 copy: the fp32 output is then not written.
    const bool copy_only = g16 && gemm_reads_copy_only(sc.g.data(), sc.g16.data(), T, I, L.out_proj, hidden);
    if (!(p.skip & kSkipGatedNorm))
      cuda::gated_rmsnorm(sc.y.data(), gate_done ? sc.gate.data() : sc.zx.data(), gate_done ? I : proj, T, I,
                          I / c.n_groups, L.gate_norm.data(), static_cast<float>(c.layer_norm_epsilon),
                          c.norm_before_gate, copy_only ? nullptr : sc.g.data(), st, g16 ? sc.g16.data() : nullptr,
                          gate_done);
    p.probe(nm.norm, sc.g.data(), T, I, I);
    mark(p.profile, StepPart::MambaGemm, st);
    if (!(p.skip & kSkipOutProj))
      gemm(sc.g.data(), g16 ? sc.g16.data() : nullptr, T, I, L.out_proj, hidden, L.out_proj_bias, out, st);
  }
  // A rank's out_proj holds its rows of the reduction (its heads): the ranks' sum, in rank order.
  p.rank.sum(out, static_cast<std::size_t>(T) * hidden, st);
}

}  // namespace parity::backend_cuda
