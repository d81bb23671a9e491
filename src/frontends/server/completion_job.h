#pragma once
// One /v1/completions or /v1/chat/completions request while the engine runs it: folds the step
// events of its sequences (one per prompt × choice) into choices — tokens, log-probs, text with
// stop strings — and writes them as OpenAI's response body or as its stream of SSE chunks.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "frontends/server/api_request.h"
#include "frontends/server/choice_text.h"
#include "frontends/server/engine_loop.h"
#include "frontends/server/responses.h"

namespace parity::server {

class CompletionJob {
 public:
  CompletionJob(GenerationRequest req, std::shared_ptr<Ticket> ticket, const TextCodec* codec, std::string model_name,
                int64_t created);

  // Applies what the engine produced within `wait`. Streaming: returns the SSE text to send now
  // (after the last choice finished: the usage chunk if asked for, then [DONE]).
  std::string advance(std::chrono::milliseconds wait);
  bool done() const { return done_; }
  nlohmann::json response() const;  // the whole body (non-streaming), once done()
  void cancel() { ticket_->cancel(); }
  int64_t completion_tokens() const;

 private:
  struct Choice {
    std::size_t prompt = 0;
    std::vector<int32_t> tokens;
    std::vector<std::vector<engine::TokenLogprob>> logprobs;
    std::vector<std::vector<engine::TokenLogprob>> prompt_logprobs;
    std::string text;
    std::unique_ptr<ChoiceText> decoder;
    std::unique_ptr<CompletionLogprobs> table;  // completions with logprobs (streaming: per chunk)
    nlohmann::json chat_logprobs = nlohmann::json::array();
    std::string finish_reason;  // empty while running
    bool started = false;       // streaming: the first chunk (echo / role) is out
  };
  // One event into its choice; streaming chunks (if any) appended to `sse`.
  void apply(SequenceEvent& e, std::string* sse);
  nlohmann::json chunk(int index, Choice& c, const std::string& text, std::size_t first_token, bool first);
  std::string echo_text(const Choice& c) const;
  void add_echo_logprobs(Choice& c);
  int64_t prompt_tokens() const;

  GenerationRequest req_;
  std::shared_ptr<Ticket> ticket_;
  const TextCodec* codec_;
  std::string model_;
  std::string id_;
  int64_t created_;
  std::vector<Choice> choices_;
  int unfinished_;
  bool done_ = false;
  bool chat() const { return req_.endpoint == Endpoint::ChatCompletions; }
};

// "cmpl-…" / "chatcmpl-…" with 24 random hex digits.
std::string new_response_id(const char* prefix);

}  // namespace parity::server
