#include "frontends/server/completion_job.h"

#include <random>

#include "frontends/server/responses.h"
#include "frontends/server/sse.h"

namespace parity::server {

using nlohmann::json;

std::string new_response_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += hex[rng() & 15];
  return id;
}

CompletionJob::CompletionJob(GenerationRequest req, std::shared_ptr<Ticket> ticket, const TextCodec* codec,
                             std::string model_name, int64_t created)
    : req_(std::move(req)), ticket_(std::move(ticket)), codec_(codec), model_(std::move(model_name)),
      id_(new_response_id(req_.endpoint == Endpoint::ChatCompletions ? "chatcmpl-" : "cmpl-")), created_(created) {
  const std::size_t n = static_cast<std::size_t>(req_.n);
  choices_.resize(req_.prompts.size() * n);
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    Choice& c = choices_[i];
    c.prompt = i / n;
    c.decoder = std::make_unique<ChoiceText>(codec_, req_.stop, req_.skip_special_tokens);
    if (!chat() && req_.logprobs) c.table = std::make_unique<CompletionLogprobs>(codec_, req_.tokens_as_ids, *req_.logprobs, 0);
  }
  unfinished_ = static_cast<int>(choices_.size());
}

std::string CompletionJob::advance(std::chrono::milliseconds wait) {
  std::string sse;
  std::vector<SequenceEvent> events = ticket_->wait(wait);
  for (SequenceEvent& e : events) apply(e, req_.stream ? &sse : nullptr);
  if (unfinished_ == 0 && !done_) {
    done_ = true;
    if (req_.stream) {
      if (req_.include_usage)
        sse += sse_event({{"id", id_},
                          {"object", chat() ? "chat.completion.chunk" : "text_completion"},
                          {"created", created_},
                          {"model", model_},
                          {"choices", json::array()},
                          {"usage", usage(prompt_tokens(), completion_tokens())}});
      sse += sse_done();
    }
  }
  return sse;
}

void CompletionJob::apply(SequenceEvent& e, std::string* sse) {
  if (e.index < 0 || static_cast<std::size_t>(e.index) >= choices_.size()) return;
  Choice& c = choices_[static_cast<std::size_t>(e.index)];
  if (!c.finish_reason.empty()) return;  // ended by a stop string; the engine's abort follows
  c.prompt_logprobs.insert(c.prompt_logprobs.end(), e.prompt_logprobs.begin(), e.prompt_logprobs.end());
  const std::size_t first = c.tokens.size();
  std::string piece;
  for (std::size_t k = 0; k < e.tokens.size(); ++k) {
    const int32_t tok = e.tokens[k];
    c.tokens.push_back(tok);
    if (k < e.logprobs.size()) c.logprobs.push_back(e.logprobs[k]);
    // A stop token ends the choice without adding its text (vLLM's default).
    const bool stop_token = e.finished == engine::FinishReason::Stop && k + 1 == e.tokens.size();
    if (!stop_token) piece += c.decoder->push(tok);
    if (c.decoder->stopped()) {
      c.finish_reason = "stop";
      ticket_->cancel_sequence(e.index);
      break;
    }
  }
  if (c.finish_reason.empty() && e.finished != engine::FinishReason::None) {
    piece += c.decoder->finish();
    switch (e.finished) {
      case engine::FinishReason::Length: c.finish_reason = "length"; break;
      case engine::FinishReason::Stop: c.finish_reason = "stop"; break;
      default: c.finish_reason = "abort"; break;
    }
  }
  c.text += piece;
  if (!c.finish_reason.empty()) --unfinished_;
  if (sse && (!piece.empty() || c.tokens.size() > first || !c.finish_reason.empty()))
    *sse += sse_event(chunk(e.index, c, piece, first, !c.started));
}

std::string CompletionJob::echo_text(const Choice& c) const {
  const Prompt& p = req_.prompts[c.prompt];
  if (p.text) return *p.text;
  return codec_ ? codec_->decode(p.ids, false) : std::string();
}

void CompletionJob::add_echo_logprobs(Choice& c) {
  const std::vector<int32_t>& ids = req_.prompts[c.prompt].ids;
  for (std::size_t k = 0; k < ids.size(); ++k)
    c.table->add(ids[k], k >= 1 && k - 1 < c.prompt_logprobs.size() ? &c.prompt_logprobs[k - 1] : nullptr);
}

json CompletionJob::chunk(int index, Choice& c, const std::string& text, std::size_t first_token, bool first) {
  const bool want_ids = req_.return_token_ids || !codec_;
  const json finish = c.finish_reason.empty() ? json(nullptr) : json(c.finish_reason);
  json ch;
  if (chat()) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !text.empty()) delta["content"] = text;
    ch = {{"index", index}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish}};
    if (req_.logprobs) {
      json content = json::array();
      for (std::size_t k = first_token; k < c.logprobs.size(); ++k)
        content.push_back(chat_logprob_entry(codec_, req_.tokens_as_ids, *req_.logprobs, c.logprobs[k]));
      ch["logprobs"] = {{"content", content}};
    }
  } else {
    ch = {{"index", index}, {"text", (first && req_.echo ? echo_text(c) : std::string()) + text},
          {"logprobs", nullptr}, {"finish_reason", finish}};
    if (c.table) {
      if (first && req_.echo) add_echo_logprobs(c);
      for (std::size_t k = first_token; k < c.tokens.size(); ++k)
        c.table->add(c.tokens[k], k < c.logprobs.size() ? &c.logprobs[k] : nullptr);
      ch["logprobs"] = c.table->take();
    }
  }
  if (want_ids) {
    ch["token_ids"] = std::vector<int32_t>(c.tokens.begin() + static_cast<std::ptrdiff_t>(first_token), c.tokens.end());
    if (first) ch["prompt_token_ids"] = req_.prompts[c.prompt].ids;
  }
  c.started = true;
  return {{"id", id_},
          {"object", chat() ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", json::array({ch})}};
}

int64_t CompletionJob::prompt_tokens() const {
  int64_t n = 0;
  for (const Prompt& p : req_.prompts) n += static_cast<int64_t>(p.ids.size());
  return n;
}

int64_t CompletionJob::completion_tokens() const {
  int64_t n = 0;
  for (const Choice& c : choices_) n += static_cast<int64_t>(c.tokens.size());
  return n;
}

json CompletionJob::response() const {
  const bool want_ids = req_.return_token_ids || !codec_;
  json choices = json::array();
  for (std::size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json stop_reason = nullptr;
    if (c.decoder->stopped()) stop_reason = c.decoder->matched_stop();
    else if (c.finish_reason == "stop" && !c.tokens.empty()) stop_reason = c.tokens.back();
    json ch;
    if (chat()) {
      ch = {{"index", i},
            {"message", {{"role", "assistant"}, {"content", c.text}}},
            {"logprobs", nullptr},
            {"finish_reason", c.finish_reason},
            {"stop_reason", stop_reason}};
      if (req_.logprobs) {
        json content = json::array();
        for (const auto& e : c.logprobs) content.push_back(chat_logprob_entry(codec_, req_.tokens_as_ids, *req_.logprobs, e));
        ch["logprobs"] = {{"content", content}};
      }
    } else {
      ch = {{"index", i},
            {"text", (req_.echo ? echo_text(c) : std::string()) + c.text},
            {"logprobs", nullptr},
            {"finish_reason", c.finish_reason},
            {"stop_reason", stop_reason}};
      if (req_.logprobs) {
        CompletionLogprobs table(codec_, req_.tokens_as_ids, *req_.logprobs, 0);
        if (req_.echo) {
          const std::vector<int32_t>& ids = req_.prompts[c.prompt].ids;
          for (std::size_t k = 0; k < ids.size(); ++k)
            table.add(ids[k], k >= 1 && k - 1 < c.prompt_logprobs.size() ? &c.prompt_logprobs[k - 1] : nullptr);
        }
        for (std::size_t k = 0; k < c.tokens.size(); ++k) table.add(c.tokens[k], k < c.logprobs.size() ? &c.logprobs[k] : nullptr);
        ch["logprobs"] = table.take();
      }
    }
    if (want_ids) {
      ch["token_ids"] = c.tokens;
      ch["prompt_token_ids"] = req_.prompts[c.prompt].ids;
    }
    choices.push_back(ch);
  }
  return {{"id", id_},
          {"object", chat() ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", model_},
          {"choices", choices},
          {"usage", usage(prompt_tokens(), completion_tokens())}};
}

}  // namespace parity::server
