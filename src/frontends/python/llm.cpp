#include "frontends/python/llm.h"

#include "accuracy/additional_config.h"
#include "accuracy/capture_run.h"
#include "accuracy/logit_validation.h"
#include "accuracy/module_pattern.h"
#include "accuracy/validation_report.h"
#include "common/error.h"
#include "frontends/common/model_tokenizer.h"
#include "io/json_file.h"
#include "model/checkpoint.h"

namespace parity::python {

Llm::Llm(const std::string& model, LlmOptions opts) : opts_(std::move(opts)) {
  if (opts_.threads < 0) throw Error("threads must be positive, got " + std::to_string(opts_.threads));
  if (opts_.max_num_seqs < 1) throw Error("max_num_seqs must be at least 1");
  if (opts_.max_num_batched_tokens < 1) throw Error("max_num_batched_tokens must be at least 1");
  if (opts_.max_model_len < 1) throw Error("max_model_len must be at least 1");
  if (!(opts_.state_memory_mb >= 0)) throw Error("state_memory_mb must be non-negative");
  additional_ = opts_.check();  // as the CLI: an impossible configuration fails before the model loads
  model_ = opts_.load(model);
  // As the CLI: a model without a (usable) tokenizer still runs on token ids; text is refused then.
  tokenizer_ = frontends::load_model_tokenizer(model, tokenizer_error_);
  // A replacement that cannot bind to this model (unknown module, wrong width) fails here, not
  // at the first call.
  accuracy::make_replacement_from_additional_config(additional_, *model_);
  numerics();  // and so does an exact grid the model's backend refuses (Model::exact_refusal)
}

cache::Numerics Llm::numerics() const {
  return opts_.numerics.resolve(*model_);
}

const tokenizer::Tokenizer* Llm::tokenizer(std::string* why) const {
  if (!tokenizer_ && why) *why = tokenizer_error_;
  return tokenizer_.get();
}

// text_flags.cpp's TextTokens::from_text, for Python arguments.
std::vector<int32_t> Llm::encode(const std::string& text, const std::string& what, bool add_special_tokens) const {
  if (!tokenizer_) throw Error(what + ": text needs the model's tokenizer: " + tokenizer_error_);
  std::vector<int32_t> ids;
  try {
    ids = tokenizer_->encode(text, add_special_tokens);
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
  if (ids.empty()) throw Error(what + ": the text encodes to no tokens");
  return ids;
}

// cmd_score.cpp: one single-shot prefill; the scored stream is request 0 for a replacement.
std::vector<float> Llm::score(const std::vector<int32_t>& tokens) const {
  std::lock_guard<std::mutex> turn(run_);
  auto replacement = accuracy::make_replacement_from_additional_config(additional_, *model_);
  if (replacement) replacement->replacer().register_request(0, tokens);
  return model::score_all_rows(*model_, tokens, numerics(), replacement ? &replacement->hooks() : nullptr);
}

// cmd_generate.cpp, with every request in one engine (continuous batching; in exact mode each
// request's results are the bits it gets alone).
std::vector<Completion> Llm::generate(const std::vector<GenerateRequest>& requests) const {
  std::lock_guard<std::mutex> turn(run_);
  engine::Engine eng(*model_, opts_.config());
  auto replacement = accuracy::make_replacement_from_additional_config(additional_, *model_);
  if (replacement) replacement->attach(eng);
  std::vector<uint64_t> ids;
  for (const GenerateRequest& r : requests) {
    engine::RequestSpec spec;
    spec.prompt = r.prompt;
    spec.forced = r.forced;
    spec.sampling = r.sampling;
    spec.return_logits = r.return_logits;
    ids.push_back(eng.add_request(std::move(spec)));
  }
  auto results = eng.run_to_completion();
  std::vector<Completion> out;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    Completion c{requests[i].prompt, std::move(results[ids[i]]), std::nullopt};
    // As `parity generate`'s "text": special tokens left out (vLLM's default).
    if (tokenizer_) c.text = tokenizer_->decode(c.result.tokens, true);
    out.push_back(std::move(c));
  }
  return out;
}

// cmd_capture.cpp
accuracy::Captures Llm::capture(const CaptureArgs& args) const {
  std::lock_guard<std::mutex> turn(run_);
  accuracy::CaptureSpec spec;
  spec.prompts = args.prompts;
  spec.forced = args.forced;
  if (spec.prompts.empty()) throw Error("capture: no prompts");
  if (spec.forced.size() > 1 && spec.forced.size() != spec.prompts.size())
    throw Error("capture: " + std::to_string(spec.forced.size()) + " forced continuations for " +
                std::to_string(spec.prompts.size()) + " prompts (give one shared or one per prompt)");
  if (!spec.forced.empty() && args.max_tokens > 0) throw Error("capture: give forced or max_tokens, not both");
  if (args.max_tokens < 0) throw Error("capture: max_tokens must be positive");
  spec.max_tokens = args.max_tokens > 0 ? args.max_tokens : 1;
  spec.layout = args.layout;
  spec.engine = opts_.config();
  std::vector<std::string> names;
  for (const auto& p : model_->probe_points()) names.push_back(p.name);
  spec.modules = accuracy::expand_module_patterns(args.modules, names);
  auto replacement = accuracy::make_replacement_from_additional_config(additional_, *model_);
  spec.replacement = replacement.get();
  return accuracy::capture_through_engine(*model_, spec);
}

// cmd_validate.cpp
ValidateResult Llm::validate(const accuracy::Captures& reference, const ValidateArgs& args) const {
  std::lock_guard<std::mutex> turn(run_);
  accuracy::ValidationOptions opt;
  if (!args.tol_map.empty()) opt.tol_map = accuracy::parse_tol_map(io::parse_hf_json(args.tol_map, "tol_map"));
  opt.divergence_tol = args.divergence_tol;
  if (!(opt.divergence_tol >= 0)) throw Error("validate: divergence_tol must be non-negative");
  if (args.max_tokens < 0) throw Error("validate: max_tokens must be positive");
  opt.max_tokens = args.max_tokens;
  if (args.prompt_index) {
    if (*args.prompt_index < 0) throw Error("validate: prompt_index must be non-negative");
    opt.prompt_indices = {*args.prompt_index};
  }
  opt.engine = opts_.config();
  opt.engine.preempt_at_step = -1;
  const auto refs = accuracy::logit_reference_from_captures(reference);
  auto replacement = accuracy::make_replacement_from_additional_config(additional_, *model_);
  opt.replacement = replacement.get();
  const accuracy::ValidationReport rep = accuracy::validate_logits(*model_, refs, opt);
  ValidateResult r;
  r.passed = rep.passed();
  r.numerics_difference = cache::numerics_difference(numerics().metadata(), reference.metadata);
  r.report = accuracy::validation_to_json(rep);
  r.report["model"] = model_->origin();
  r.report["mode"] = opts_.numerics.exact ? "exact" : "plain";
  r.report["numerics"] = numerics().metadata();
  if (!r.numerics_difference.empty()) r.report["numerics_difference"] = r.numerics_difference;
  r.summary = accuracy::validation_summary(rep);
  return r;
}

}  // namespace parity::python
