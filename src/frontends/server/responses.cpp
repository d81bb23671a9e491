#include "frontends/server/responses.h"

namespace parity::server {

using nlohmann::json;

json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"code", e.status}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  return {{"error", err}};
}

json models_list(const std::string& model_name, int64_t max_model_len, int64_t created) {
  json m = {{"id", model_name},         {"object", "model"}, {"created", created},
            {"owned_by", "parity"},     {"root", model_name}, {"parent", nullptr},
            {"max_model_len", max_model_len}};
  return {{"object", "list"}, {"data", json::array({m})}};
}

json usage(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

std::string token_label(const TextCodec* codec, int32_t id, bool as_ids) {
  if (!codec || as_ids) return "token_id:" + std::to_string(id);
  return codec->token_text(id);
}

void CompletionLogprobs::add(int32_t token, const std::vector<engine::TokenLogprob>* entry) {
  const std::string label = token_label(codec_, token, as_ids_);
  tokens_.push_back(label);
  offsets_.push_back(offset_);
  offset_ += static_cast<int64_t>(label.size());
  if (!entry || entry->empty()) {
    lps_.push_back(nullptr);
    tops_.push_back(nullptr);
    return;
  }
  lps_.push_back((*entry)[0].logprob);
  json top = json::object();
  for (std::size_t i = 1; i < entry->size() && static_cast<int>(i) <= top_n_; ++i) {
    const std::string l = token_label(codec_, (*entry)[i].token, as_ids_);
    if (!top.contains(l)) top[l] = (*entry)[i].logprob;  // two ids with one text: the likelier stays
  }
  tops_.push_back(top);
}

json CompletionLogprobs::take() {
  json out = {{"tokens", tokens_}, {"token_logprobs", lps_}, {"top_logprobs", tops_}, {"text_offset", offsets_}};
  tokens_ = json::array();
  lps_ = json::array();
  tops_ = json::array();
  offsets_ = json::array();
  return out;
}

json chat_logprob_entry(const TextCodec* codec, bool as_ids, int top_n, const std::vector<engine::TokenLogprob>& entry) {
  auto one = [&](const engine::TokenLogprob& t) {
    const std::string label = token_label(codec, t.token, as_ids);
    return json{{"token", label}, {"logprob", t.logprob}, {"bytes", std::vector<uint8_t>(label.begin(), label.end())}};
  };
  json e = one(entry.at(0));
  json top = json::array();
  for (std::size_t i = 1; i < entry.size() && static_cast<int>(i) <= top_n; ++i) top.push_back(one(entry[i]));
  e["top_logprobs"] = top;
  return e;
}

}  // namespace parity::server
