#include "accuracy/logit_validation.h"

#include <algorithm>

#include "accuracy/replacement_session.h"
#include "common/error.h"

namespace parity::accuracy {

bool PromptValidation::passed() const { return first_failure() < 0; }

int PromptValidation::first_failure() const {
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (!tokens[i].passed()) return static_cast<int>(i);
  return -1;
}

bool ValidationReport::passed() const {
  return std::all_of(prompts.begin(), prompts.end(), [](const PromptValidation& p) { return p.passed(); });
}

std::vector<PromptReference> logit_reference_from_captures(const Captures& c, const std::string& module) {
  std::vector<PromptReference> out;
  for (std::size_t i = 0; i < c.prompts.size(); ++i) {
    const PromptCapture& p = c.prompts[i];
    auto flat = flatten(p);
    auto it = flat.find(module);
    if (it == flat.end())
      throw Error("logit validation: reference prompt " + std::to_string(i) + " has no " + module +
                  " rows (capture them with --modules " + module + ")");
    if (p.prompt_token_ids.empty())
      throw Error("logit validation: reference prompt " + std::to_string(i) + " has no prompt_token_ids");
    const auto P = static_cast<int64_t>(p.prompt_token_ids.size());
    if (it->second.rows < P)
      throw Error("logit validation: reference prompt " + std::to_string(i) + " has " +
                  std::to_string(it->second.rows) + " " + module + " rows; at least " + std::to_string(P) +
                  " (one per prompt token) are needed to check a generated token");
    out.push_back({p.prompt_token_ids, p.continuation_token_ids, std::move(it->second)});
  }
  return out;
}

std::vector<int32_t> expected_tokens(const PromptReference& ref, int64_t count) {
  const auto P = static_cast<int64_t>(ref.prompt.size());
  std::vector<int32_t> e;
  for (int64_t j = 0; j < count; ++j)
    e.push_back(j < static_cast<int64_t>(ref.continuation.size())
                    ? ref.continuation[static_cast<std::size_t>(j)]
                    : argmax_logit(ref.logits.row(P - 1 + j), static_cast<int>(ref.logits.cols)));
  return e;
}

namespace {

PromptValidation validate_prompt(engine::Engine& eng, const PromptReference& ref, int index,
                                 const ValidationOptions& opt, int vocab) {
  if (ref.logits.cols != vocab)
    throw Error("logit validation: reference prompt " + std::to_string(index) + " has " +
                std::to_string(ref.logits.cols) + " logits per row but the model's vocabulary is " +
                std::to_string(vocab));
  PromptValidation pv;
  pv.prompt_index = index;
  pv.prompt_len = static_cast<int64_t>(ref.prompt.size());
  const int64_t P = pv.prompt_len;
  int64_t n = ref.logits.rows - P + 1;
  if (opt.max_tokens > 0) n = std::min<int64_t>(n, opt.max_tokens);
  pv.expected_tokens = expected_tokens(ref, n);
  for (int32_t t : pv.expected_tokens)
    if (t < 0 || t >= vocab)
      throw Error("logit validation: reference prompt " + std::to_string(index) + " continues with token " +
                  std::to_string(t) + ", outside the vocabulary");

  std::vector<int32_t> input = ref.prompt;
  int64_t start = 0;  // index of the first expected token this run generates
  while (start < n) {
    engine::RequestSpec spec;
    spec.prompt = input;
    spec.sampling.temperature = 0.0f;
    spec.sampling.max_tokens = static_cast<int>(n - start);
    spec.return_logits = true;
    spec.reference_prompt = index;
    const uint64_t id = eng.add_request(spec);
    auto results = eng.run_to_completion();
    const engine::RequestResult& r = results.at(id);
    const int64_t got = std::min<int64_t>(static_cast<int64_t>(r.tokens.size()), n - start);
    if (got < 1 || static_cast<int64_t>(r.logit_rows.size()) < got)
      throw Error("logit validation: the engine returned " + std::to_string(r.tokens.size()) + " tokens and " +
                  std::to_string(r.logit_rows.size()) + " logit rows for prompt " + std::to_string(index));
    int64_t d = got;  // first divergent token of this run, or `got`
    for (int64_t j = 0; j < got; ++j)
      if (r.tokens[static_cast<std::size_t>(j)] != pv.expected_tokens[static_cast<std::size_t>(start + j)]) {
        d = j;
        break;
      }
    const int64_t checked = std::min(d + 1, got);  // the divergent token itself is checked too
    for (int64_t j = 0; j < checked; ++j) {
      const int64_t pos = P - 1 + start + j;
      if (r.logit_positions[static_cast<std::size_t>(j)] != pos)
        throw Error("logit validation: expected the logit row of position " + std::to_string(pos) + ", got " +
                    std::to_string(r.logit_positions[static_cast<std::size_t>(j)]));
      TokenCheck c = check_token_logits(r.logit_rows[static_cast<std::size_t>(j)].data(), ref.logits.row(pos), vocab,
                                        r.tokens[static_cast<std::size_t>(j)],
                                        pv.expected_tokens[static_cast<std::size_t>(start + j)], opt.tol_map,
                                        opt.divergence_tol);
      c.index = static_cast<int>(start + j);
      c.position = pos;
      c.run = pv.runs;
      pv.tokens.push_back(std::move(c));
    }
    ++pv.runs;
    // Continue from the reference's stream: its tokens up to and including the checked ones.
    input.insert(input.end(), pv.expected_tokens.begin() + start, pv.expected_tokens.begin() + start + checked);
    start += checked;
  }
  return pv;
}

}  // namespace

ValidationReport validate_logits(const model::Model& model, const std::vector<PromptReference>& refs,
                                 const ValidationOptions& opt) {
  if (opt.tol_map.empty()) throw Error("logit validation: the tolerance map is empty");
  if (!(opt.divergence_tol >= 0)) throw Error("logit validation: divergence tolerance must be >= 0");
  std::vector<int> which = opt.prompt_indices;
  if (which.empty())
    for (std::size_t i = 0; i < refs.size(); ++i) which.push_back(static_cast<int>(i));
  for (int i : which)
    if (i < 0 || static_cast<std::size_t>(i) >= refs.size())
      throw Error("logit validation: prompt index " + std::to_string(i) + " is outside the reference's " +
                  std::to_string(refs.size()) + " prompt(s)");
  engine::Engine eng(model, opt.engine);
  if (opt.replacement) opt.replacement->attach(eng);
  ValidationReport rep;
  rep.tol_map = opt.tol_map;
  rep.divergence_tol = opt.divergence_tol;
  for (int i : which) rep.prompts.push_back(validate_prompt(eng, refs[static_cast<std::size_t>(i)], i, opt, model.vocab_size()));
  return rep;
}

}  // namespace parity::accuracy
