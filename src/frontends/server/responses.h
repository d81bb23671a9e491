#pragma once
// Response bodies in OpenAI's shapes that do not depend on a running request: the error body,
// the model list, usage, log-prob tables.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "frontends/server/api_request.h"
#include "frontends/server/text_codec.h"

namespace parity::server {

// {"error": {"message", "type", "param", "code"}} (code: the HTTP status, as vLLM writes it).
nlohmann::json error_body(const ApiError& e);
nlohmann::json models_list(const std::string& model_name, int64_t max_model_len, int64_t created);
nlohmann::json usage(int64_t prompt_tokens, int64_t completion_tokens);

// How a token appears in log-prob tables: its text, or "token_id:N" (no tokenizer, or the
// request's return_tokens_as_token_ids).
std::string token_label(const TextCodec* codec, int32_t id, bool as_ids);

// The completions endpoint's log-prob table {"tokens", "token_logprobs", "top_logprobs",
// "text_offset"}, built a token at a time.
class CompletionLogprobs {
 public:
  CompletionLogprobs(const TextCodec* codec, bool as_ids, int top_n, int64_t first_offset)
      : codec_(codec), as_ids_(as_ids), top_n_(top_n), offset_(first_offset) {}
  // entry: the chosen token's log-prob first, then the top ones (null when absent: a prompt's first token)
  void add(int32_t token, const std::vector<engine::TokenLogprob>* entry);
  nlohmann::json take();  // the table so far, and start a new one at the running offset
  bool empty() const { return tokens_.empty(); }

 private:
  const TextCodec* codec_;
  bool as_ids_;
  int top_n_;
  int64_t offset_;
  nlohmann::json tokens_ = nlohmann::json::array(), lps_ = nlohmann::json::array(),
                 tops_ = nlohmann::json::array(), offsets_ = nlohmann::json::array();
};

// The chat endpoint's entry {"token", "logprob", "bytes", "top_logprobs": [...]}.
nlohmann::json chat_logprob_entry(const TextCodec* codec, bool as_ids, int top_n,
                                  const std::vector<engine::TokenLogprob>& entry);

}  // namespace parity::server
