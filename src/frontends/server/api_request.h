#pragma once
// Request bodies of the OpenAI-compatible endpoints, parsed and validated by one pure function
// each: JSON text in, a request the engine can run (or an OpenAI-style error) out. Nothing here
// touches the network or the engine, so the parser can be unit-tested and fuzzed on its own.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "engine/request.h"
#include "frontends/server/text_codec.h"

namespace parity::server {

// What the HTTP layer answers for a request that cannot run: an HTTP status and the body's
// {"error": {"message", "type", "param", "code"}}.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending field, empty when none
};

// What the parser needs to know about the served model.
struct ApiLimits {
  std::string model_name;       // the id /v1/models lists; a request naming another model gets 404
  int vocab_size = 0;
  int64_t max_model_len = 0;    // prompt + max_tokens per request
  int max_n = 64;               // choices per prompt
  int max_prompts = 64;         // prompts per completions request
  int max_logprobs = 20;
  int max_stop = 16;            // stop strings (and stop token ids)
  int max_sequences = 1 << 20;  // prompts × n: more could never be admitted at once
  const TextCodec* codec = nullptr;  // nullptr: the model has no tokenizer
};

enum class Endpoint { Completions, ChatCompletions };

// One prompt of a request, as token ids, plus the text that echo repeats.
struct Prompt {
  std::vector<int32_t> ids;
  std::optional<std::string> text;  // as given; empty when the prompt came as ids
};

struct GenerationRequest {
  Endpoint endpoint = Endpoint::Completions;
  std::vector<Prompt> prompts;   // completions: one or more; chat: the rendered conversation
  int n = 1;
  int max_tokens = 16;
  float temperature = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;                 // 0 = off (the API's -1 too)
  std::optional<uint64_t> seed;  // choice i of a prompt samples with seed + i
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::optional<int> logprobs;   // completions: top-N; chat: top_logprobs when logprobs is true
  bool echo = false;
  bool stream = false;
  bool include_usage = false;    // stream_options.include_usage
  bool return_token_ids = false; // vLLM's field: token ids of prompt and completion in the response
  bool skip_special_tokens = true;
  bool tokens_as_ids = false;    // vLLM's return_tokens_as_token_ids: log-prob tables name tokens "token_id:N"

  // The engine request for choice `choice` of prompt `prompt` (seed: the request's, else
  // `fallback_seed`); `eos` joins the stop ids unless ignore_eos.
  engine::RequestSpec spec(std::size_t prompt, int choice, uint64_t fallback_seed, std::optional<int32_t> eos) const;
};

// /tokenize ({"prompt": text} or {"messages": [...]}, vLLM's shapes): the ids; /detokenize
// ({"tokens": [...]}): ids checked against the vocabulary.
struct TokenizeRequest {
  std::vector<int32_t> tokens;
};
struct DetokenizeRequest {
  std::vector<int32_t> tokens;
};

template <class T>
using Parsed = std::variant<T, ApiError>;

Parsed<GenerationRequest> parse_completion_request(std::string_view body, const ApiLimits& limits);
// The conversation is rendered with the tokenizer's chat template (chat_template.h).
Parsed<GenerationRequest> parse_chat_request(std::string_view body, const ApiLimits& limits);
Parsed<TokenizeRequest> parse_tokenize_request(std::string_view body, const ApiLimits& limits);
Parsed<DetokenizeRequest> parse_detokenize_request(std::string_view body, const ApiLimits& limits);

}  // namespace parity::server
