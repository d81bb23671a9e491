#include "model/mamba2_model.h"

#include <cstring>
#include <string>

#include "common/error.h"
#include "io/hf_config.h"
#include "kernels/gemm.h"
#include "kernels/norm.h"
#include "kernels/residual.h"
#include "model/mamba2_mixer.h"
#include "model/workspace.h"

namespace parity::model {

std::unique_ptr<Mamba2Model> Mamba2Model::load(const Checkpoint& ck) {
  std::string arch = io::architecture_of(ck.config);
  if (arch != "Mamba2ForCausalLM")
    throw Error(ck.origin + ": architecture '" + arch + "' is not supported (supported: Mamba2ForCausalLM)");
  return build(ck, io::parse_mamba2_config(ck.config));
}

std::unique_ptr<Mamba2Model> Mamba2Model::load_rank(const Checkpoint& ck, const io::Mamba2Config& rank_cfg,
                                                    const cache::ModelCacheSpec& cache, TensorParallelRank tp) {
  auto m = build(ck, rank_cfg);
  m->spec_ = cache;
  m->tp_ = tp;
  return m;
}

std::unique_ptr<Mamba2Model> Mamba2Model::build(const Checkpoint& ck, const io::Mamba2Config& cfg) {
  auto m = std::unique_ptr<Mamba2Model>(new Mamba2Model());
  m->cfg_ = cfg;
  m->origin_ = ck.origin;
  m->keepalive_ = ck.keepalive;
  m->w_ = load_mamba2_weights(m->cfg_, ck);
  m->spec_.num_mamba_layers = m->cfg_.num_hidden_layers;
  m->spec_.mamba = m->cfg_;
  m->spec_.chunk_size = m->cfg_.chunk_size;
  for (int l = 0; l < m->cfg_.num_hidden_layers; ++l) {
    const std::string b = "backbone.layers." + std::to_string(l);
    m->names_.push_back({b + ".mixer.in_proj", b + ".mixer.conv1d", b + ".mixer.dt", b + ".mixer.norm", b + ".mixer", b});
  }
  return m;
}

std::vector<ProbePoint> mamba2_probe_points(const io::Mamba2Config& c) {
  std::vector<ProbePoint> p;
  p.push_back({"backbone.embeddings", c.hidden_size, "token embeddings"});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string b = "backbone.layers." + std::to_string(l);
    p.push_back({b + ".mixer.in_proj", c.in_proj_dim(), "in_proj output [z | xBC | dt]"});
    p.push_back({b + ".mixer.conv1d", c.conv_dim(), "causal conv1d output over xBC, before SiLU"});
    p.push_back({b + ".mixer.dt", c.num_heads, "raw dt (before dt_bias, softplus and clamp)"});
    p.push_back({b + ".mixer.norm", c.intermediate_size, "gated RMSNorm output"});
    p.push_back({b + ".mixer", c.hidden_size, "mixer output (out_proj)"});
    p.push_back({b, c.hidden_size, "block output (residual stream)"});
  }
  p.push_back({"backbone.norm_f", c.hidden_size, "final RMSNorm output"});
  p.push_back({"lm_head", c.vocab_size, "logits"});
  return p;
}

std::vector<ProbePoint> Mamba2Model::probe_points() const { return mamba2_probe_points(cfg_); }

void Mamba2Model::forward(const ForwardBatch& b, cache::ModelCache& mc, ScanMode mode, float* logits,
                          ProbeHooks* hooks) const {
  validate_batch(*this, b, mc, mode);
  cache::MambaStateCache& cache = *mc.mamba(tp_.rank);
  const int T = static_cast<int>(b.tokens.size());
  const int D = cfg_.hidden_size;
  const float eps = static_cast<float>(cfg_.layer_norm_epsilon);
  const std::size_t TD = std::size_t(T) * D;
  float* resid = scratch(Scratch::Resid, TD);
  float* normed = scratch(Scratch::Normed, TD);
  float* out = scratch(Scratch::MixerOut, TD);

  const ProbeRows meta = probe_rows(b, hooks);
  auto probe = [&](const std::string& name, float* data, int cols) {
    if (hooks && hooks->wants(name)) hooks->visit(name, data, T, cols, meta);
  };

  // Embedding lookup straight from the (possibly mmapped) table, widened exactly.
  const io::TensorView& E = *w_.embeddings;
  for (int t = 0; t < T; ++t) {
    float* dst = resid + std::size_t(t) * D;
    const std::size_t off = std::size_t(b.tokens[t]) * D;
    if (E.dtype == DType::F32) {
      std::memcpy(dst, static_cast<const float*>(E.data) + off, std::size_t(D) * 4);
    } else {
      const uint16_t* src = static_cast<const uint16_t*>(E.data) + off;
      for (int i = 0; i < D; ++i) dst[i] = E.dtype == DType::BF16 ? bf16_to_f32(src[i]) : f16_to_f32(src[i]);
    }
  }

  probe("backbone.embeddings", resid, D);
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const LayerNames& N = names_[l];
    kernels::rmsnorm(resid, T, D, w_.norms[l].data(), eps, normed);
    mamba2_mixer_forward(cfg_, w_.layers[l], l, b, normed, out, cache, mode,
                         {N.in_proj, N.conv1d, N.dt, N.norm}, hooks, meta);
    tp_.sum(out, TD);  // a rank's out_proj holds its rows of the reduction: the whole is the ranks' sum
    probe(N.mixer, out, D);
    kernels::residual_add(resid, out, TD);
    probe(N.block, resid, D);
  }
  if (tp_.size == 1)  // ranks share the positions: their caller advances them once
    for (const SeqChunk& s : b.seqs) mc.set_position(s.slot, s.start + s.n);

  const int V = cfg_.vocab_size;
  if (hooks && (hooks->wants("backbone.norm_f") || hooks->wants("lm_head"))) {
    // A probed head sees every row; the asked-for rows are then picked out. Row-wise norm and the
    // M-invariant GEMM give each row the same bits as the fast path below.
    std::vector<float> hn(std::size_t(T) * D), all(std::size_t(T) * V);
    kernels::rmsnorm(resid, T, D, w_.norm_f.data(), eps, hn.data());
    probe("backbone.norm_f", hn.data(), D);
    kernels::gemm(hn.data(), T, D, w_.lm_head, nullptr, all.data(), V);
    probe("lm_head", all.data(), V);
    for (std::size_t i = 0; i < b.logit_rows.size(); ++i)
      std::memcpy(logits + i * V, all.data() + std::size_t(b.logit_rows[i]) * V, std::size_t(V) * 4);
    return;
  }
  // Only the asked-for rows reach the head: row-wise norm + M-invariant GEMM keep their bits.
  const int R = static_cast<int>(b.logit_rows.size());
  if (R == 0) return;
  std::vector<float> last(std::size_t(R) * D);
  for (int i = 0; i < R; ++i)
    std::memcpy(last.data() + std::size_t(i) * D, resid + std::size_t(b.logit_rows[i]) * D, std::size_t(D) * 4);
  kernels::rmsnorm(last.data(), R, D, w_.norm_f.data(), eps, last.data());
  kernels::gemm(last.data(), R, D, w_.lm_head, nullptr, logits, cfg_.vocab_size);
}

}  // namespace parity::model
