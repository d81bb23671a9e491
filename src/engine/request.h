#pragma once
// A request as the engine sees it: what the user asked for, and how far it has got.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace parity::engine {

struct SamplingParams {
  float temperature = 0.0f;  // 0 = greedy
  int top_k = 0;             // 0 = off
  float top_p = 1.0f;        // 1 = off
  uint64_t seed = 0;         // per request: same seed, same tokens, whatever shares the batch
  int max_tokens = 16;
  std::vector<int32_t> stop_token_ids;
  int logprobs = 0;  // top-N log-probs per generated token (0 = none)
};

struct RequestSpec {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  // Teacher forcing: when non-empty, these are fed one per step instead of sampled tokens, and
  // the request ends after the last of them has been fed (max_tokens is ignored).
  std::vector<int32_t> forced;
  bool return_logits = false;         // raw logit row for every generated / forced position
  bool return_prompt_logits = false;  // raw logit rows for every prompt position as well
  // Accuracy tools: bind this request to reference prompt i of a tensor-replacement set
  // (-1: resolve by longest verified prefix match, seed 000's default).
  int reference_prompt = -1;
};

enum class FinishReason { None, Length, Stop, Forced, Aborted };
const char* finish_reason_name(FinishReason r);

struct TokenLogprob {
  int32_t token;
  float logprob;
};

// What one step produced for one request.
struct StepOutput {
  uint64_t id = 0;
  std::vector<int32_t> new_tokens;
  std::vector<std::vector<TokenLogprob>> logprobs;  // per new token, if asked
  // Raw logit rows produced in this step with their absolute positions (row of position p is
  // the distribution after token p).
  std::vector<int64_t> logit_positions;
  std::vector<std::vector<float>> logit_rows;
  FinishReason finished = FinishReason::None;
};

enum class RequestStatus { Waiting, Running, Finished };

struct Request {
  uint64_t id = 0;
  RequestSpec spec;
  std::vector<int32_t> tokens;  // prompt + every token produced so far
  int64_t num_computed = 0;     // tokens whose effect is in the state slot
  int num_generated = 0;        // sampled or forced tokens appended
  int slot = -1;
  int num_preemptions = 0;
  int64_t arrival = 0;          // FCFS order key
  RequestStatus status = RequestStatus::Waiting;
  FinishReason finish = FinishReason::None;
  // Prefix caching: the identity its states are cached under (the probe hooks' for it); no value:
  // it neither reuses nor leaves cached state.
  std::optional<uint64_t> prefix_identity;
  // Speculative decoding: how many draft tokens the next pass may verify after `tokens`
  // (0: none), and the drafts of the pass being run.
  int spec_allowance = 0;
  std::vector<int32_t> drafts;

  int64_t prompt_len() const { return static_cast<int64_t>(spec.prompt.size()); }
};

}  // namespace parity::engine
