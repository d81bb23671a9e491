// Fuzz target: an HTTP request body as `parity serve` receives it, through every endpoint's
// parser (completions, chat with a chat template, tokenize, detokenize), with and without a
// tokenizer. An accepted request must satisfy what the engine relies on (ids in the vocabulary,
// length within the model's limit, sane sampling values); a rejected one must carry a 4xx status
// and a message. Accepted requests also run through what follows parsing without an engine: the
// engine specs, the stop-string matcher over the prompt's tokens, the error body.
#include <cmath>
#include <cstdlib>
#include <string>

#include "../tests/server_test_codec.h"
#include "frontends/server/api_request.h"
#include "frontends/server/choice_text.h"
#include "frontends/server/responses.h"
#include "fuzz_target.h"

namespace {

using namespace parity::server;

// A finding: libFuzzer (and the replay test, through the abort) reports it.
void require(bool ok) {
  if (!ok) std::abort();
}

ApiLimits limits(const TextCodec* codec) {
  ApiLimits l;
  l.model_name = "m";
  l.vocab_size = 300;  // the byte codec's ids are 0..256
  l.max_model_len = 512;
  l.codec = codec;
  l.max_sequences = 64;
  return l;
}

void check_error(const ApiError& e) {
  require(e.status >= 400 && e.status < 500);
  require(!e.message.empty());
  (void)error_body(e).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void check_generation(const GenerationRequest& r, const ApiLimits& lim) {
  require(!r.prompts.empty() && r.n >= 1 && r.n <= lim.max_n);
  require(static_cast<int64_t>(r.prompts.size()) * r.n <= lim.max_sequences);
  require(r.max_tokens >= 1);
  require(std::isfinite(r.temperature) && r.temperature >= 0);
  require(r.top_p > 0 && r.top_p <= 1 && r.top_k >= 0);
  require(!r.logprobs || (*r.logprobs >= 0 && *r.logprobs <= lim.max_logprobs));
  for (std::size_t p = 0; p < r.prompts.size(); ++p) {
    const auto& ids = r.prompts[p].ids;
    require(!ids.empty());
    require(static_cast<int64_t>(ids.size()) + r.max_tokens <= lim.max_model_len);
    for (int32_t id : ids) require(id >= 0 && id < lim.vocab_size);
    for (int c = 0; c < r.n; ++c) {
      const parity::engine::RequestSpec s = r.spec(p, c, 7, 0);
      require(s.prompt == ids && s.sampling.max_tokens == r.max_tokens);
    }
    // The prompt's own tokens through the stop-string matcher, as if generated.
    if (lim.codec) {
      ChoiceText t(lim.codec, r.stop, r.skip_special_tokens);
      std::size_t n = 0;
      for (int32_t id : ids) n += t.push(id).size();
      n += t.finish().size();
      require(n <= lim.codec->decode(ids, r.skip_special_tokens).size());
    }
  }
  for (int32_t id : r.stop_token_ids) require(id >= 0 && id < lim.vocab_size);
}

template <class T, class F>
void run(const Parsed<T>& p, F&& on_ok) {
  if (const ApiError* e = std::get_if<ApiError>(&p)) check_error(*e);
  else on_ok(std::get<T>(p));
}

void fuzz_http_request(const uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  parity::test::ByteCodec codec;
  codec.tmpl =
      "{% for message in messages %}{{ '<|' + message['role'] + '|>\\n' + message['content'] | trim + '\\n' }}"
      "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}";
  for (const TextCodec* c : {static_cast<const TextCodec*>(nullptr), static_cast<const TextCodec*>(&codec)}) {
    const ApiLimits lim = limits(c);
    run(parse_completion_request(body, lim), [&](const GenerationRequest& r) { check_generation(r, lim); });
    run(parse_chat_request(body, lim), [&](const GenerationRequest& r) {
      require(c != nullptr);  // chat needs the tokenizer
      check_generation(r, lim);
    });
    run(parse_tokenize_request(body, lim), [&](const TokenizeRequest&) { require(c != nullptr); });
    run(parse_detokenize_request(body, lim), [&](const DetokenizeRequest& r) {
      for (int32_t id : r.tokens) require(id >= 0 && id < lim.vocab_size);
      require(c != nullptr);
      (void)c->decode(r.tokens, false);
    });
  }
}

}  // namespace

PARITY_FUZZ_TARGET(http_request, fuzz_http_request)
