#pragma once
// Teacher-forced logit validation with divergence retry (NxDI's algorithm, on parity's engine).
// For each reference prompt the expected tokens are the ones the reference fed after the prompt
// (p{i}/continuation_token_ids) where the captures have them, else the argmax of its logit rows
// from position P−1 on (row p = the distribution after token p): a retry must continue the
// stream the reference's later rows were computed on. Generate greedily through the
// engine; every token up to and including the first one that differs is checked
// (check_token_logits); then the prompt is extended with the reference's tokens up to that point
// and generation restarts as a new request, until every expected token has been checked. With
// tensor replacement, each run's request is bound explicitly to its reference prompt, so a retry
// can never be matched to another prompt.
#include <cstdint>
#include <vector>

#include "accuracy/captures_file.h"
#include "accuracy/logit_tolerance.h"
#include "engine/engine.h"
#include "model/model.h"

namespace parity::accuracy {

class ReplacementSession;

struct PromptReference {
  std::vector<int32_t> prompt;
  std::vector<int32_t> continuation;  // tokens the reference fed after the prompt (may be empty)
  Matrix logits;  // [positions, vocab], row p = logits after token p; needs at least P rows
};
// Expected token j (position P + j): continuation[j] if present, else argmax of row P − 1 + j.
std::vector<int32_t> expected_tokens(const PromptReference& ref, int64_t count);

// One PromptReference per prompt from the captures' `module` rows (step captures flattened).
// Throws naming the prompt when the module is missing or covers no generated token.
std::vector<PromptReference> logit_reference_from_captures(const Captures& c, const std::string& module = "lm_head");

struct ValidationOptions {
  TolMap tol_map = default_tol_map();
  double divergence_tol = 0.001;
  int max_tokens = 0;               // 0: every token the reference covers
  std::vector<int> prompt_indices;  // empty: all
  engine::EngineConfig engine;
  ReplacementSession* replacement = nullptr;  // attached to the validation engine when set
};

struct PromptValidation {
  int prompt_index = 0;
  int64_t prompt_len = 0;
  std::vector<int32_t> expected_tokens;
  std::vector<TokenCheck> tokens;  // one per expected token, in order
  int runs = 0;                    // generation runs (1 + retries)
  bool passed() const;
  int first_failure() const;  // index into tokens, -1 if none
};

struct ValidationReport {
  std::vector<PromptValidation> prompts;
  TolMap tol_map;
  double divergence_tol = 0;
  bool passed() const;
};

ValidationReport validate_logits(const model::Model& model, const std::vector<PromptReference>& refs,
                                 const ValidationOptions& opt);

}  // namespace parity::accuracy
