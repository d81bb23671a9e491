#include "frontends/server/api_request.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "frontends/server/chat_template.h"

namespace parity::server {

using nlohmann::json;

namespace {

// Thrown inside the parser only; the entry points turn it into the returned ApiError.
struct Reject {
  ApiError e;
};

[[noreturn]] void reject(std::string message, std::string param = "", int status = 400) {
  ApiError e;
  e.status = status;
  e.message = std::move(message);
  e.param = std::move(param);
  if (status == 404) e.type = "NotFoundError";
  throw Reject{std::move(e)};
}

json parse_body(std::string_view body) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    reject(std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) reject("the request body must be a JSON object");
  return j;
}

// A field that is absent or null counts as not given (the OpenAI API allows null for optional fields).
const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

const char* kind(const json& v) { return v.type_name(); }

std::optional<int64_t> get_int(const json& j, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) reject(std::string("'") + name + "' must be an integer, not " + kind(*v), name);
  const auto range = [&] {
    reject(std::string("'") + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
               ", not " + v->dump(),
           name);
  };
  if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(hi)) range();
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) range();
  return x;
}

std::optional<double> get_number(const json& j, const char* name) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) reject(std::string("'") + name + "' must be a number, not " + kind(*v), name);
  const double x = v->get<double>();
  if (!std::isfinite(x)) reject(std::string("'") + name + "' must be finite", name);
  return x;
}

std::optional<bool> get_bool(const json& j, const char* name) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) reject(std::string("'") + name + "' must be a boolean, not " + kind(*v), name);
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& j, const char* name) {
  const json* v = field(j, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) reject(std::string("'") + name + "' must be a string, not " + kind(*v), name);
  return v->get<std::string>();
}

void check_model(const json& j, const ApiLimits& lim) {
  auto m = get_string(j, "model");
  if (m && *m != lim.model_name) reject("The model '" + *m + "' does not exist; this server serves '" + lim.model_name + "'", "model", 404);
}

const TextCodec& need_codec(const ApiLimits& lim, const char* param, const char* what) {
  if (!lim.codec)
    reject(std::string("model has no tokenizer: ") + what + " needs one (send the prompt as token ids, or serve a "
               "checkpoint folder with a tokenizer.json)",
           param);
  return *lim.codec;
}

std::vector<int32_t> token_ids(const json& arr, const ApiLimits& lim, const char* param) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const json& t = arr[i];
    if (!t.is_number_integer())
      reject(std::string("'") + param + "' token at index " + std::to_string(i) + " must be an integer, not " + kind(t),
             param);
    const bool neg = t.is_number_integer() && !t.is_number_unsigned() && t.get<int64_t>() < 0;
    if (neg || t.get<uint64_t>() >= static_cast<uint64_t>(lim.vocab_size))
      reject(std::string("'") + param + "' token id " + t.dump() + " at index " + std::to_string(i) +
                 " is outside the vocabulary [0, " + std::to_string(lim.vocab_size) + ")",
             param);
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

Prompt text_prompt(const std::string& text, const ApiLimits& lim) {
  const TextCodec& c = need_codec(lim, "prompt", "a text prompt");
  Prompt p;
  try {
    p.ids = c.encode(text, true);
  } catch (const Error& e) {
    reject(std::string("the prompt cannot be tokenized: ") + e.what(), "prompt");
  }
  p.text = text;
  return p;
}

// "prompt": a string, an array of token ids, an array of strings, or an array of token-id arrays.
std::vector<Prompt> parse_prompts(const json& j, const ApiLimits& lim) {
  const json* v = field(j, "prompt");
  if (!v) reject("'prompt' is required", "prompt");
  std::vector<Prompt> out;
  if (v->is_string()) {
    out.push_back(text_prompt(v->get<std::string>(), lim));
  } else if (v->is_array()) {
    if (v->empty()) reject("'prompt' is an empty list", "prompt");
    const json& first = (*v)[0];
    if (first.is_number_integer()) {
      out.push_back({token_ids(*v, lim, "prompt"), std::nullopt});
    } else if (first.is_string() || first.is_array()) {
      if (v->size() > static_cast<std::size_t>(lim.max_prompts))
        reject("'prompt' holds " + std::to_string(v->size()) + " prompts; at most " + std::to_string(lim.max_prompts),
               "prompt");
      for (const json& e : *v) {
        if (e.is_string() && first.is_string()) out.push_back(text_prompt(e.get<std::string>(), lim));
        else if (e.is_array() && first.is_array()) out.push_back({token_ids(e, lim, "prompt"), std::nullopt});
        else
          reject("'prompt' must be a string, a list of token ids, a list of strings or a list of token-id lists; "
                 "this list mixes " + std::string(kind(first)) + " and " + kind(e),
                 "prompt");
      }
    } else {
      reject(std::string("'prompt' list entries must be integers, strings or lists, not ") + kind(first), "prompt");
    }
  } else {
    reject(std::string("'prompt' must be a string or a list, not ") + kind(*v), "prompt");
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].ids.empty()) reject("prompt " + std::to_string(i) + " is empty (no tokens)", "prompt");
  return out;
}

void parse_stop(const json& j, GenerationRequest& r, const ApiLimits& lim) {
  if (const json* v = field(j, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      for (const json& s : *v) {
        if (!s.is_string()) reject(std::string("'stop' entries must be strings, not ") + kind(s), "stop");
        r.stop.push_back(s.get<std::string>());
      }
    } else {
      reject(std::string("'stop' must be a string or a list of strings, not ") + kind(*v), "stop");
    }
    if (r.stop.size() > static_cast<std::size_t>(lim.max_stop))
      reject("'stop' holds " + std::to_string(r.stop.size()) + " strings; at most " + std::to_string(lim.max_stop), "stop");
    for (const std::string& s : r.stop)
      if (s.empty()) reject("'stop' strings must not be empty", "stop");
    if (!r.stop.empty()) need_codec(lim, "stop", "stop strings");
  }
  if (const json* v = field(j, "stop_token_ids")) {
    if (!v->is_array()) reject(std::string("'stop_token_ids' must be a list of token ids, not ") + kind(*v), "stop_token_ids");
    if (v->size() > static_cast<std::size_t>(lim.max_stop))
      reject("'stop_token_ids' holds " + std::to_string(v->size()) + " ids; at most " + std::to_string(lim.max_stop),
             "stop_token_ids");
    r.stop_token_ids = token_ids(*v, lim, "stop_token_ids");
  }
}

// Fields whose effect parity does not implement: refused when they ask for something, so a
// client never silently gets a different distribution than it asked for.
void refuse_unsupported(const json& j) {
  for (const char* name : {"presence_penalty", "frequency_penalty"})
    if (auto x = get_number(j, name); x && *x != 0.0)
      reject(std::string("'") + name + "' is not supported by parity (only 0)", name);
  if (auto x = get_number(j, "repetition_penalty"); x && *x != 1.0)
    reject("'repetition_penalty' is not supported by parity (only 1)", "repetition_penalty");
  if (const json* v = field(j, "logit_bias"); v && !(v->is_object() && v->empty()))
    reject("'logit_bias' is not supported by parity", "logit_bias");
  if (const json* v = field(j, "suffix")) {
    if (!v->is_string()) reject(std::string("'suffix' must be a string, not ") + kind(*v), "suffix");
    if (!v->get<std::string>().empty()) reject("'suffix' is not supported by parity", "suffix");
  }
  if (auto x = get_int(j, "best_of", 1, 1 << 20); x && *x != 1)
    reject("'best_of' is not supported by parity (only 1)", "best_of");
  if (const json* v = field(j, "tools"); v && !(v->is_array() && v->empty()))
    reject("'tools' (function calling) is not supported by parity", "tools");
  if (const json* v = field(j, "response_format")) {
    auto t = v->is_object() ? v->find("type") : v->end();
    if (!v->is_object() || t == v->end() || *t != "text")
      reject("'response_format' other than {\"type\": \"text\"} is not supported by parity", "response_format");
  }
}

// Fields shared by both endpoints: sampling, stop, stream.
void parse_common(const json& j, GenerationRequest& r, const ApiLimits& lim) {
  check_model(j, lim);
  refuse_unsupported(j);
  r.n = static_cast<int>(get_int(j, "n", 1, lim.max_n).value_or(1));
  if (auto t = get_number(j, "temperature")) {
    if (*t < 0) reject("'temperature' must be >= 0", "temperature");
    r.temperature = static_cast<float>(*t);
  }
  if (auto p = get_number(j, "top_p")) {
    if (!(*p > 0 && *p <= 1)) reject("'top_p' must be in (0, 1]", "top_p");
    r.top_p = static_cast<float>(*p);
  }
  if (auto k = get_int(j, "top_k", -1, std::numeric_limits<int32_t>::max())) r.top_k = *k <= 0 ? 0 : static_cast<int>(*k);
  if (auto s = get_int(j, "seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()))
    r.seed = static_cast<uint64_t>(*s);
  parse_stop(j, r, lim);
  r.ignore_eos = get_bool(j, "ignore_eos").value_or(false);
  r.stream = get_bool(j, "stream").value_or(false);
  if (const json* so = field(j, "stream_options")) {
    if (!so->is_object()) reject(std::string("'stream_options' must be an object, not ") + kind(*so), "stream_options");
    r.include_usage = get_bool(*so, "include_usage").value_or(false);
    if (!r.stream && r.include_usage) reject("'stream_options' is only allowed when 'stream' is true", "stream_options");
  }
  r.return_token_ids = get_bool(j, "return_token_ids").value_or(false);
  r.skip_special_tokens = get_bool(j, "skip_special_tokens").value_or(true);
  r.tokens_as_ids = get_bool(j, "return_tokens_as_token_ids").value_or(false);
}

// max_tokens (default `dflt`, or what the model's length leaves when dflt < 0) against the length limit.
void bound_length(const json& j, GenerationRequest& r, const ApiLimits& lim, int64_t dflt, const char* name) {
  int64_t longest = 0;
  for (const Prompt& p : r.prompts) longest = std::max<int64_t>(longest, static_cast<int64_t>(p.ids.size()));
  if (longest >= lim.max_model_len)
    reject("This model's maximum context length is " + std::to_string(lim.max_model_len) +
               " tokens; the prompt has " + std::to_string(longest) + ", which leaves no room for a completion",
           "prompt");
  auto m = get_int(j, name, 1, std::numeric_limits<int32_t>::max());
  const int64_t room = lim.max_model_len - longest;
  const int64_t want = m ? *m : (dflt < 0 ? room : std::min(dflt, room));
  if (m && longest + *m > lim.max_model_len)
    reject("This model's maximum context length is " + std::to_string(lim.max_model_len) + " tokens; you requested " +
               std::to_string(longest + *m) + " (" + std::to_string(longest) + " in the prompt, " +
               std::to_string(*m) + " in the completion)",
           name);
  r.max_tokens = static_cast<int>(want);
  const int64_t seqs = static_cast<int64_t>(r.prompts.size()) * r.n;
  if (seqs > lim.max_sequences)
    reject("the request asks for " + std::to_string(seqs) + " sequences (prompts x n); this server runs at most " +
               std::to_string(lim.max_sequences) + " at once",
           "n");
}

std::vector<ChatMessage> parse_messages(const json& j) {
  const json* v = field(j, "messages");
  if (!v) reject("'messages' is required", "messages");
  if (!v->is_array() || v->empty()) reject("'messages' must be a non-empty list", "messages");
  std::vector<ChatMessage> out;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) reject(where + " must be an object, not " + kind(m), "messages");
    ChatMessage cm;
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) reject(where + ".role must be a string", "messages");
    cm.role = role->get<std::string>();
    auto c = m.find("content");
    if (c == m.end() || c->is_null()) {
      cm.content = "";
    } else if (c->is_string()) {
      cm.content = c->get<std::string>();
    } else if (c->is_array()) {
      // OpenAI's content parts: only text parts, joined with newlines as vLLM does.
      for (std::size_t k = 0; k < c->size(); ++k) {
        const json& part = (*c)[k];
        auto type = part.is_object() ? part.find("type") : part.end();
        auto text = part.is_object() ? part.find("text") : part.end();
        if (type == part.end() || *type != "text" || text == part.end() || !text->is_string())
          reject(where + ".content[" + std::to_string(k) + "] must be {\"type\": \"text\", \"text\": string}; parity "
                 "serves text only",
                 "messages");
        if (k) cm.content += "\n";
        cm.content += text->get<std::string>();
      }
    } else {
      reject(where + ".content must be a string or a list of text parts, not " + kind(*c), "messages");
    }
    out.push_back(std::move(cm));
  }
  return out;
}

// The conversation as prompt ids: the chat template, then the tokenizer (without adding special
// tokens again: the template writes them, as vLLM does).
Prompt render_chat(const std::vector<ChatMessage>& msgs, bool add_generation_prompt, const ApiLimits& lim) {
  const TextCodec& c = need_codec(lim, "messages", "a chat request");
  if (!c.chat_template())
    reject("this model's tokenizer has no chat_template (tokenizer_config.json), so chat requests cannot be "
           "rendered; use /v1/completions",
           "messages");
  ChatTemplateInput in;
  in.messages = msgs;
  in.add_generation_prompt = add_generation_prompt;
  in.bos_token = c.bos_token();
  in.eos_token = c.eos_token();
  Prompt p;
  try {
    p.text = render_chat_template(*c.chat_template(), in);
    p.ids = c.encode(*p.text, false);
  } catch (const Error& e) {
    reject(std::string("the chat template cannot render this conversation: ") + e.what(), "messages");
  }
  if (p.ids.empty()) reject("the rendered conversation has no tokens", "messages");
  return p;
}

template <class T, class F>
Parsed<T> guarded(F&& f) {
  try {
    return f();
  } catch (const Reject& r) {
    return r.e;
  } catch (const json::exception& e) {  // a type mismatch the checks above did not foresee
    ApiError err;
    err.message = std::string("invalid request: ") + e.what();
    return err;
  }
}

}  // namespace

engine::RequestSpec GenerationRequest::spec(std::size_t prompt, int choice, uint64_t fallback_seed,
                                            std::optional<int32_t> eos) const {
  engine::RequestSpec s;
  s.prompt = prompts.at(prompt).ids;
  s.sampling.temperature = temperature;
  s.sampling.top_p = top_p;
  s.sampling.top_k = top_k;
  s.sampling.seed = seed.value_or(fallback_seed) + static_cast<uint64_t>(choice);
  s.sampling.max_tokens = max_tokens;
  s.sampling.stop_token_ids = stop_token_ids;
  if (eos && !ignore_eos) s.sampling.stop_token_ids.push_back(*eos);
  // The chosen token's logprob is the first entry whatever N is, so logprobs 0 asks for 1 and drops it.
  s.sampling.logprobs = logprobs ? std::max(1, *logprobs) : 0;
  s.return_prompt_logits = echo && logprobs.has_value();
  return s;
}

Parsed<GenerationRequest> parse_completion_request(std::string_view body, const ApiLimits& lim) {
  return guarded<GenerationRequest>([&]() -> Parsed<GenerationRequest> {
    const json j = parse_body(body);
    GenerationRequest r;
    r.endpoint = Endpoint::Completions;
    parse_common(j, r, lim);
    if (auto lp = get_int(j, "logprobs", 0, lim.max_logprobs)) r.logprobs = static_cast<int>(*lp);
    r.echo = get_bool(j, "echo").value_or(false);
    r.prompts = parse_prompts(j, lim);
    bound_length(j, r, lim, 16, "max_tokens");
    return r;
  });
}

Parsed<GenerationRequest> parse_chat_request(std::string_view body, const ApiLimits& lim) {
  return guarded<GenerationRequest>([&]() -> Parsed<GenerationRequest> {
    const json j = parse_body(body);
    GenerationRequest r;
    r.endpoint = Endpoint::ChatCompletions;
    parse_common(j, r, lim);
    const bool lp = get_bool(j, "logprobs").value_or(false);
    auto top = get_int(j, "top_logprobs", 0, lim.max_logprobs);
    if (top && !lp) reject("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (lp) r.logprobs = static_cast<int>(top.value_or(0));
    const auto msgs = parse_messages(j);
    const bool gen = get_bool(j, "add_generation_prompt").value_or(true);
    if (get_bool(j, "echo").value_or(false)) reject("'echo' is not supported on chat completions by parity", "echo");
    r.prompts.push_back(render_chat(msgs, gen, lim));
    // max_completion_tokens is the newer name; max_tokens wins when both are given.
    bound_length(j, r, lim, -1, field(j, "max_tokens") ? "max_tokens" : "max_completion_tokens");
    return r;
  });
}

Parsed<TokenizeRequest> parse_tokenize_request(std::string_view body, const ApiLimits& lim) {
  return guarded<TokenizeRequest>([&]() -> Parsed<TokenizeRequest> {
    const json j = parse_body(body);
    check_model(j, lim);
    TokenizeRequest r;
    const bool has_prompt = field(j, "prompt") != nullptr, has_msgs = field(j, "messages") != nullptr;
    if (has_prompt == has_msgs) reject("give exactly one of 'prompt' (a string) and 'messages' (a chat)", "prompt");
    if (has_prompt) {
      auto text = get_string(j, "prompt");
      const TextCodec& c = need_codec(lim, "prompt", "/tokenize");
      try {
        r.tokens = c.encode(*text, get_bool(j, "add_special_tokens").value_or(true));
      } catch (const Error& e) {
        reject(std::string("the prompt cannot be tokenized: ") + e.what(), "prompt");
      }
    } else {
      if (get_bool(j, "add_special_tokens").value_or(false))
        reject("'add_special_tokens' with 'messages' is not supported: the chat template writes them", "add_special_tokens");
      r.tokens = render_chat(parse_messages(j), get_bool(j, "add_generation_prompt").value_or(true), lim).ids;
    }
    return r;
  });
}

Parsed<DetokenizeRequest> parse_detokenize_request(std::string_view body, const ApiLimits& lim) {
  return guarded<DetokenizeRequest>([&]() -> Parsed<DetokenizeRequest> {
    const json j = parse_body(body);
    check_model(j, lim);
    const json* t = field(j, "tokens");
    if (!t) reject("'tokens' is required", "tokens");
    if (!t->is_array()) reject(std::string("'tokens' must be a list of token ids, not ") + kind(*t), "tokens");
    DetokenizeRequest r;
    r.tokens = token_ids(*t, lim, "tokens");
    need_codec(lim, "tokens", "/detokenize");
    return r;
  });
}

}  // namespace parity::server
