#pragma once
// The Python module's LLM object in plain C++: a loaded model plus the engine options it was
// opened with, and the five things the CLI does with them (score, generate, probes, capture,
// validate), each calling the same library functions as the matching src/frontends/cli/cmd_*.cpp.
// bindings.cpp turns its inputs and results into Python and numpy objects.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "accuracy/captures_file.h"
#include "engine/engine.h"
#include "frontends/common/engine_options.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace parity::python {

// The CLI's engine flags as keyword arguments (the serving features and --preempt-at-step are not
// offered: they keep their defaults, off).
using LlmOptions = frontends::EngineOptions;

struct GenerateRequest {
  std::vector<int32_t> prompt;
  std::vector<int32_t> forced;  // teacher forcing; empty: sample
  engine::SamplingParams sampling;
  bool return_logits = false;
};

struct Completion {
  std::vector<int32_t> prompt_token_ids;
  engine::RequestResult result;
  std::optional<std::string> text;  // the generated tokens decoded, special tokens left out; with a tokenizer
};

struct CaptureArgs {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> forced;  // none, one shared, or one per prompt
  int max_tokens = 0;                        // 0: the prompt only
  std::vector<std::string> modules;          // patterns, as capture --modules
  accuracy::CaptureLayout layout = accuracy::CaptureLayout::Flat;
};

struct ValidateArgs {
  std::optional<int> prompt_index;
  int max_tokens = 0;
  std::string tol_map;  // JSON text; empty: the default map
  double divergence_tol = 0.001;
};

struct ValidateResult {
  bool passed = false;
  nlohmann::json report;  // validate --json's report
  std::string summary;    // validate's printed table
  std::string numerics_difference;  // empty when the reference has this run's numerics identity
};

class Llm {
 public:
  Llm(const std::string& model, LlmOptions opts);

  const model::Model& model() const { return *model_; }
  const LlmOptions& options() const { return opts_; }
  cache::Numerics numerics() const;

  // The model's tokenizer (tokenizer.json in the folder, or builtin:NAME's built-in one), or null
  // with the reason in *why (no tokenizer.json, or one parity cannot run).
  const tokenizer::Tokenizer* tokenizer(std::string* why = nullptr) const;
  // Text as the CLI's --prompt-text / --forced-text take it: `what` names the argument in errors;
  // prompts get the tokenizer's special tokens (BOS, template), continuations do not.
  std::vector<int32_t> encode(const std::string& text, const std::string& what, bool add_special_tokens) const;

  std::vector<float> score(const std::vector<int32_t>& tokens) const;  // [rows, vocab] row-major
  std::vector<Completion> generate(const std::vector<GenerateRequest>& requests) const;
  accuracy::Captures capture(const CaptureArgs& args) const;
  ValidateResult validate(const accuracy::Captures& reference, const ValidateArgs& args) const;

 private:
  LlmOptions opts_;
  nlohmann::json additional_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::string tokenizer_error_;
  // The bindings release the GIL while a call runs; calls on one LLM from several Python threads
  // take turns (the model's forward and the kernels' thread pool are not meant to run twice at once).
  mutable std::mutex run_;
};

}  // namespace parity::python
