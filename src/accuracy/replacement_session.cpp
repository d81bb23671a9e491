#include "accuracy/replacement_session.h"

#include <cctype>
#include <limits>

#include "common/error.h"
#include "io/json_file.h"
#include "io/safetensors.h"

namespace parity::accuracy {

namespace {

// Every probe point of this engine holds fp32 activations (DESIGN.md, numerics rule 5).
constexpr DType kLiveDType = DType::F32;

std::vector<std::vector<int32_t>> read_prompt_ids(const std::string& path) {
  const nlohmann::json j = io::read_json_file(path);
  auto bad = [&](const std::string& why) { return Error(path + ": prompt_token_ids: " + why); };
  if (!j.is_array()) throw bad("expected an array with one token list per prompt");
  std::vector<std::vector<int32_t>> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json* p = &j[i];
    // A tokenizer's .tolist() keeps the batch dimension: [[ids]] per prompt.
    if (p->is_array() && p->size() == 1 && (*p)[0].is_array()) p = &(*p)[0];
    if (!p->is_array()) throw bad("prompt " + std::to_string(i) + " is not a list of token ids");
    std::vector<int32_t> ids;
    for (const auto& t : *p) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > std::numeric_limits<int32_t>::max())
        throw bad("prompt " + std::to_string(i) + " holds " + t.dump() + ", not a token id");
      ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
    }
    out.push_back(std::move(ids));
  }
  return out;
}

// p{i}/{module} or p{i}/{module}/step{k} → module; empty for anything else.
std::string module_of_key(const std::string& key) {
  if (key.size() < 3 || key[0] != 'p' || !std::isdigit(static_cast<unsigned char>(key[1]))) return {};
  const auto a = key.find('/');
  if (a == std::string::npos) return {};
  const auto b = key.find('/', a + 1);
  std::string m = key.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  return m == "prompt_token_ids" || m == "continuation_token_ids" ? std::string() : m;
}

std::map<std::string, DType> file_dtypes(const std::string& path) {
  std::map<std::string, DType> d;
  auto f = io::SafetensorsFile::open(path);
  for (const auto& t : f->tensors()) {
    const std::string m = module_of_key(t.name);
    if (m.empty()) continue;
    auto [it, fresh] = d.emplace(m, t.dtype);
    if (!fresh && it->second != t.dtype)
      throw Error(path + ": " + m + " is stored as both " + dtype_name(it->second) + " and " + dtype_name(t.dtype));
  }
  return d;
}

}  // namespace

ReplacementSession::ReplacementSession(ReplacementConfig cfg, const model::Model& model) {
  if (cfg.tensors && !cfg.tensors_path.empty())
    throw Error("tensor replacement: give the reference tensors in memory or as tensors_path, not both");
  if (cfg.prompt_token_ids && !cfg.prompt_token_ids_path.empty())
    throw Error("tensor replacement: give prompt_token_ids in memory or as prompt_token_ids_path, not both");
  Captures caps;
  std::map<std::string, DType> dtypes = cfg.tensor_dtypes;
  if (cfg.tensors) {
    caps = std::move(*cfg.tensors);
  } else if (!cfg.tensors_path.empty()) {
    caps = read_captures(cfg.tensors_path);
    dtypes = file_dtypes(cfg.tensors_path);
  } else {
    throw Error("tensor replacement: no reference tensors (give tensors in memory or tensors_path)");
  }
  if (!cfg.prompt_token_ids_path.empty()) cfg.prompt_token_ids = read_prompt_ids(cfg.prompt_token_ids_path);
  if (cfg.prompt_token_ids) {
    if (cfg.prompt_token_ids->size() != caps.prompts.size())
      throw Error("tensor replacement: " + std::to_string(cfg.prompt_token_ids->size()) +
                  " prompt token lists for " + std::to_string(caps.prompts.size()) + " reference prompts");
    for (std::size_t i = 0; i < caps.prompts.size(); ++i) caps.prompts[i].prompt_token_ids = (*cfg.prompt_token_ids)[i];
  }
  replacer_ = std::make_unique<TensorReplacer>(TensorReplacer::from_captures(caps, cfg.on_missing_position));
  if (!cfg.modules.empty()) replacer_->restrict_to(cfg.modules);

  std::map<std::string, int> points;
  for (const auto& p : model.probe_points()) points[p.name] = p.cols;
  for (const auto& m : replacer_->modules()) {
    auto it = points.find(m);
    if (it == points.end())
      throw Error("tensor replacement: " + m + " is not a probe point of " + model.origin() +
                  " (`parity probes` lists them; e.g. backbone.layers.0.mixer, lm_head)");
    if (replacer_->feature_size(m) != it->second)
      throw Error("tensor replacement: " + m + " has " + std::to_string(replacer_->feature_size(m)) +
                  " features in the reference but " + std::to_string(it->second) + " in the model");
    auto d = dtypes.find(m);
    const DType have = d == dtypes.end() ? DType::F32 : d->second;
    if (have != kLiveDType && !cfg.allow_dtype_widening)
      throw Error(std::string("tensor replacement: ") + m + " is " + dtype_name(have) +
                  " in the reference but the live tensor is " + dtype_name(kLiveDType) +
                  "; set \"allow_dtype_widening\": true to inject the exactly widened values");
  }
  hooks_ = std::make_unique<ReplacementHooks>(*replacer_);
}

void ReplacementSession::attach(engine::Engine& e) {
  e.set_probe_hooks(hooks_.get());
  listen(e);
}

void ReplacementSession::listen(engine::Engine& e) {
  e.set_request_listener([this](uint64_t id, const engine::RequestSpec& spec) { on_request(id, spec); });
  e.set_finish_listener([this](uint64_t id, engine::FinishReason) { on_finish(id); });
}

void ReplacementSession::on_request(uint64_t id, const engine::RequestSpec& spec) {
  if (spec.reference_prompt >= 0) replacer_->bind_request(id, spec.reference_prompt);
  else replacer_->register_request(id, spec.prompt);
}

std::string ReplacementSession::describe() const {
  const auto& s = replacer_->stats();
  return "tensor replacement: " + std::to_string(replacer_->modules().size()) + " module(s) from " +
         std::to_string(replacer_->num_prompts()) + " reference prompt(s), on_missing_position " +
         missing_position_name(replacer_->policy()) + "; " + std::to_string(s.rows_replaced) + " rows replaced, " +
         std::to_string(s.rows_past_reference) + " past the reference";
}

}  // namespace parity::accuracy
