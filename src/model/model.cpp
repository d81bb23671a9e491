#include "model/model.h"

#include <string>

#include "common/error.h"
#include "io/hf_config.h"
#include "io/hybrid_spec.h"
#include "model/hybrid_model.h"
#include "model/mamba2_model.h"

namespace parity::model {

std::vector<std::string> supported_architectures() {
  return {"Mamba2ForCausalLM", "GraniteMoeHybridForCausalLM", "NemotronHForCausalLM", "BambaForCausalLM",
          "FalconH1ForCausalLM"};
}

std::unique_ptr<Model> load_model(const Checkpoint& ck, const ModelOptions& opts) {
  const std::string arch = io::architecture_of(ck.config);
  if (arch == "Mamba2ForCausalLM") return Mamba2Model::load(ck);
  if (io::is_hybrid_architecture(arch)) return HybridModel::load(ck, opts);
  std::string all;
  for (const auto& a : supported_architectures()) all += (all.empty() ? "" : ", ") + a;
  throw Error(ck.origin + ": architecture '" + arch + "' is not supported (supported: " + all + ")");
}

std::string Model::exact_refusal(const kernels::ExactGrid& grid) const {
  if (grid.products == kernels::ScanProducts::float32) return "";
  return std::string("--scan-products ") + (grid.products == kernels::ScanProducts::split ? "split" : "bfloat16") +
         ": the " + device() + " backend forms the scan's products in fp32 only (the tensor-core walk is the CUDA " +
         "backend's: --device cuda)";
}

HostFloats Model::host_floats(std::size_t n) const {
  return HostFloats(new float[n], [](float* p) { delete[] p; });
}

float* LogitsBuffer::rows(const Model& m, std::size_t rows) {
  const std::size_t V = static_cast<std::size_t>(m.vocab_size());
  if (rows * V > floats_) {
    floats_ = (rows + 15) / 16 * 16 * V;
    mem_ = m.host_floats(floats_);
  }
  return mem_.get();
}

cache::Numerics stamp_backend(const Model& m, cache::Numerics n) {
  n.device = m.device();
  n.tensor_parallel = m.cache_spec().tensor_parallel;
  if (n.exact)
    if (const std::string why = m.exact_refusal(n.grid); !why.empty())
      throw Error("exact mode refused for " + m.origin() + ": " + why);
  return n;
}

cache::Numerics default_numerics(const Model& m, ScanMode mode) {
  return stamp_backend(m, cache::resolve_numerics(mode == ScanMode::Exact, std::nullopt, std::nullopt,
                                                  cache::StaggerChoice::Auto, m.chunk_size(), m.default_exact_cell()));
}

std::vector<float> score_all_rows(const Model& m, const std::vector<int32_t>& tokens, ScanMode mode,
                                  ProbeHooks* hooks) {
  return score_all_rows(m, tokens, default_numerics(m, mode), hooks);
}

std::vector<float> score_all_rows(const Model& m, const std::vector<int32_t>& tokens, const cache::Numerics& numerics,
                                  ProbeHooks* hooks) {
  const int n = static_cast<int>(tokens.size());
  if (n == 0) throw Error("score: the token list is empty");
  const ScanMode mode = numerics.exact ? ScanMode::Exact : ScanMode::Plain;
  cache::ModelCache c = cache::make_single_cache(m.cache_spec(), n, numerics);
  ForwardBatch b;
  b.tokens = tokens;
  const int slot = c.allocate();
  if (!c.reserve(slot, n)) throw Error("internal: a single-sequence cache cannot hold its own tokens");
  b.seqs.push_back({slot, 0, n});
  for (int i = 0; i < n; ++i) b.logit_rows.push_back(i);
  std::vector<float> out(std::size_t(n) * static_cast<std::size_t>(m.vocab_size()));
  m.forward(b, c, mode, out.data(), hooks);
  return out;
}

void validate_batch(const Model& m, const ForwardBatch& b, const cache::ModelCache& cache, ScanMode mode) {
  const cache::ModelCacheSpec &want = m.cache_spec(), &have = cache.spec();
  if (want.num_mamba_layers != have.num_mamba_layers || want.num_attention_layers != have.num_attention_layers ||
      want.num_kv_heads != have.num_kv_heads || want.head_dim != have.head_dim ||
      (want.num_mamba_layers > 0 && (want.mamba.conv_dim() != have.mamba.conv_dim() ||
                                     want.mamba.num_heads != have.mamba.num_heads ||
                                     want.mamba.head_dim != have.mamba.head_dim ||
                                     want.mamba.state_size != have.mamba.state_size ||
                                     want.mamba.chunk_size != have.mamba.chunk_size)))
    throw Error("forward: the cache was built for another model's layers");
  if (want.tensor_parallel != have.tensor_parallel)
    throw Error("forward: the cache was built for tensor parallel size " + std::to_string(have.tensor_parallel) +
                ", the model runs on " + std::to_string(want.tensor_parallel) + " ranks");
  const int vocab_size = m.vocab_size();
  if (mode == ScanMode::Exact && !cache.exact())
    throw Error("forward: exact mode needs a state cache built with replay rows (exact = true)");
  if (!b.request_ids.empty() && b.request_ids.size() != b.seqs.size())
    throw Error("forward: request_ids must have one entry per sequence chunk");
  if (!b.draft_from.empty() && b.draft_from.size() != b.seqs.size())
    throw Error("forward: draft_from must have one entry per sequence chunk");
  std::size_t total = 0;
  for (const SeqChunk& s : b.seqs) {
    if (s.n < 1) throw Error("forward: a sequence chunk has no tokens");
    if (!cache.in_use(s.slot)) throw Error("forward: state slot " + std::to_string(s.slot) + " is not allocated");
    if (cache.position(s.slot) != s.start)
      throw Error("forward: slot " + std::to_string(s.slot) + " is at position " +
                  std::to_string(cache.position(s.slot)) + " but the chunk starts at " + std::to_string(s.start));
    if (cache.kv() && cache.kv()->capacity(s.slot) < s.start + s.n)
      throw Error("forward: slot " + std::to_string(s.slot) + " has KV blocks for " +
                  std::to_string(cache.kv()->capacity(s.slot)) + " tokens but the chunk ends at " +
                  std::to_string(s.start + s.n));
    total += static_cast<std::size_t>(s.n);
  }
  for (std::size_t i = 0; i < b.seqs.size(); ++i)
    for (std::size_t j = i + 1; j < b.seqs.size(); ++j)
      if (b.seqs[i].slot == b.seqs[j].slot) throw Error("forward: slot appears twice in one pass");
  if (total != b.tokens.size()) throw Error("forward: token count does not match the sequence chunks");
  for (std::size_t i = 0; i < b.tokens.size(); ++i)
    if (b.tokens[i] < 0 || b.tokens[i] >= vocab_size)
      throw Error("token id " + std::to_string(b.tokens[i]) + " at row " + std::to_string(i) +
                  " is outside the vocabulary [0, " + std::to_string(vocab_size) + ")");
  for (int r : b.logit_rows)
    if (r < 0 || static_cast<std::size_t>(r) >= total) throw Error("forward: logit row out of range");
}

ProbeRows probe_rows(const ForwardBatch& b, const ProbeHooks* hooks) {
  ProbeRows meta;
  if (!hooks) return meta;
  meta.batch = &b;
  for (std::size_t i = 0; i < b.seqs.size(); ++i)
    for (int j = 0; j < b.seqs[i].n; ++j) {
      meta.seq.push_back(static_cast<int>(i));
      meta.position.push_back(b.seqs[i].start + j);
    }
  return meta;
}

}  // namespace parity::model
