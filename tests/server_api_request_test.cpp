// The server's request parser: every accepted form of a completions / chat / tokenize request,
// and every rejection naming the field and the reason (the HTTP layer turns them into 400/404).
#include <gtest/gtest.h>

#include "frontends/server/api_request.h"
#include "server_test_codec.h"

namespace parity::server {
namespace {

ApiLimits limits(const TextCodec* codec = nullptr) {
  ApiLimits l;
  l.model_name = "m";
  l.vocab_size = 300;
  l.max_model_len = 64;
  l.codec = codec;
  l.max_sequences = 20;
  return l;
}

GenerationRequest ok(const Parsed<GenerationRequest>& p) {
  if (auto* e = std::get_if<ApiError>(&p)) ADD_FAILURE() << "rejected: " << e->message;
  return std::get<GenerationRequest>(p);
}

ApiError err(const Parsed<GenerationRequest>& p) {
  if (std::holds_alternative<GenerationRequest>(p)) {
    ADD_FAILURE() << "accepted";
    return {};
  }
  return std::get<ApiError>(p);
}

TEST(ServerApiRequest, CompletionDefaultsFollowOpenAI) {
  GenerationRequest r = ok(parse_completion_request(R"({"model": "m", "prompt": [1, 2, 3]})", limits()));
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_FALSE(r.prompts[0].text.has_value());
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.temperature, 1.0f);
  EXPECT_EQ(r.top_p, 1.0f);
  EXPECT_EQ(r.top_k, 0);
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.seed.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.logprobs.has_value());
}

TEST(ServerApiRequest, SamplingFieldsReachTheEngineSpec) {
  GenerationRequest r = ok(parse_completion_request(
      R"({"prompt": [[4, 5], [6]], "max_tokens": 7, "temperature": 0.5, "top_p": 0.25, "top_k": -1,
          "seed": 41, "n": 2, "stop_token_ids": [9], "logprobs": 0, "echo": true, "stream": true,
          "stream_options": {"include_usage": true}, "user": "ignored", "unknown_field": {"x": 1}})",
      limits()));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.top_k, 0);  // -1 = off
  EXPECT_TRUE(r.include_usage);
  const engine::RequestSpec s = r.spec(1, 1, 999, std::nullopt);
  EXPECT_EQ(s.prompt, (std::vector<int32_t>{6}));
  EXPECT_EQ(s.sampling.seed, 42u);  // choice i: seed + i
  EXPECT_EQ(s.sampling.max_tokens, 7);
  EXPECT_FLOAT_EQ(s.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(s.sampling.top_p, 0.25f);
  EXPECT_EQ(s.sampling.stop_token_ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(s.sampling.logprobs, 1);  // logprobs 0 still needs the chosen token's entry
  EXPECT_TRUE(s.return_prompt_logits);  // echo + logprobs scores the prompt
  EXPECT_EQ(r.spec(0, 0, 999, 0).sampling.stop_token_ids, (std::vector<int32_t>{9, 0}));  // EOS stops
  r.ignore_eos = true;
  EXPECT_EQ(r.spec(0, 0, 999, 0).sampling.stop_token_ids, (std::vector<int32_t>{9}));
  r.seed.reset();
  EXPECT_EQ(r.spec(0, 3, 999, std::nullopt).sampling.seed, 1002u);  // no seed: the server's random one
}

TEST(ServerApiRequest, RejectsNameTheFieldAndReason) {
  struct Case {
    const char* body;
    const char* param;
    const char* needle;
  };
  const Case cases[] = {
      {R"({"prompt": [1], "max_tokens": "5"})", "max_tokens", "must be an integer"},
      {R"({"prompt": [1], "max_tokens": 0})", "max_tokens", "between 1"},
      {R"({"prompt": [1], "max_tokens": 64})", "max_tokens", "maximum context length is 64"},
      {R"({"prompt": [1], "max_tokens": 18446744073709551615})", "max_tokens", "between 1"},
      {R"({"prompt": [1, 300]})", "prompt", "outside the vocabulary [0, 300)"},
      {R"({"prompt": [1, -1]})", "prompt", "outside the vocabulary"},
      {R"({"prompt": [1, 2.5]})", "prompt", "must be an integer"},
      {R"({"prompt": []})", "prompt", "empty list"},
      {R"({"prompt": [[]]})", "prompt", "is empty"},
      {R"({"prompt": [[1], "a"]})", "prompt", "mixes"},
      {R"({"prompt": {"a": 1}})", "prompt", "must be a string or a list"},
      {R"({})", "prompt", "'prompt' is required"},
      {R"({"prompt": "text"})", "prompt", "model has no tokenizer"},
      {R"({"prompt": [1], "temperature": -1})", "temperature", ">= 0"},
      {R"({"prompt": [1], "top_p": 0})", "top_p", "(0, 1]"},
      {R"({"prompt": [1], "n": 0})", "n", "between 1"},
      {R"({"prompt": [[1], [2]], "n": 11})", "n", "at most 20"},
      {R"({"prompt": [1], "logprobs": 21})", "logprobs", "between 0 and 20"},
      {R"({"prompt": [1], "stream": "yes"})", "stream", "must be a boolean"},
      {R"({"prompt": [1], "stream_options": {"include_usage": true}})", "stream_options", "only allowed"},
      {R"({"prompt": [1], "stop": "x"})", "stop", "model has no tokenizer"},
      {R"({"prompt": [1], "stop_token_ids": [1000]})", "stop_token_ids", "outside the vocabulary"},
      {R"({"prompt": [1], "presence_penalty": 0.5})", "presence_penalty", "not supported"},
      {R"({"prompt": [1], "logit_bias": {"1": 2}})", "logit_bias", "not supported"},
      {R"({"prompt": [1], "best_of": 3})", "best_of", "not supported"},
      {R"({"prompt": [1], "model": 3})", "model", "must be a string"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    ApiError e = err(parse_completion_request(c.body, limits()));
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param);
    EXPECT_NE(e.message.find(c.needle), std::string::npos) << e.message;
  }
}

TEST(ServerApiRequest, MalformedBodiesAre400) {
  for (const char* body : {"", "{", "[1, 2]", "null", "\"x\"", "{\"prompt\": [1]} trailing", "\xff\xfe"}) {
    SCOPED_TRACE(body);
    ApiError e = err(parse_completion_request(body, limits()));
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
  }
}

TEST(ServerApiRequest, AnotherModelIs404) {
  ApiError e = err(parse_completion_request(R"({"model": "gpt-4", "prompt": [1]})", limits()));
  EXPECT_EQ(e.status, 404);
  EXPECT_NE(e.message.find("'gpt-4' does not exist"), std::string::npos);
}

TEST(ServerApiRequest, TextPromptsAndStopStringsUseTheTokenizer) {
  test::ByteCodec codec;
  GenerationRequest r = ok(parse_completion_request(R"({"prompt": ["ab", "c"], "stop": ["\n", "##"]})", limits(&codec)));
  ASSERT_EQ(r.prompts.size(), 2u);
  EXPECT_EQ(r.prompts[0].ids, (std::vector<int32_t>{0, 'a' + 1, 'b' + 1}));  // special tokens added
  EXPECT_EQ(r.prompts[0].text, "ab");
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "##"}));
  ApiError e = err(parse_completion_request(R"({"prompt": "x", "stop": [""]})", limits(&codec)));
  EXPECT_NE(e.message.find("must not be empty"), std::string::npos);
}

TEST(ServerApiRequest, PromptLengthIsBoundedByTheModel) {
  test::ByteCodec codec;
  const std::string long_text(64, 'x');  // 65 ids with the BOS
  ApiError e = err(parse_completion_request("{\"prompt\": \"" + long_text + "\"}", limits(&codec)));
  EXPECT_NE(e.message.find("leaves no room"), std::string::npos) << e.message;
  // Without max_tokens a request gets min(16, what the length leaves).
  GenerationRequest r = ok(parse_completion_request("{\"prompt\": \"" + std::string(60, 'x') + "\"}", limits(&codec)));
  EXPECT_EQ(r.max_tokens, 3);
}

TEST(ServerApiRequest, ChatNeedsATemplate) {
  const char* body = R"({"messages": [{"role": "user", "content": "hi"}]})";
  EXPECT_NE(err(parse_chat_request(body, limits())).message.find("model has no tokenizer"), std::string::npos);
  test::ByteCodec codec;
  EXPECT_NE(err(parse_chat_request(body, limits(&codec))).message.find("no chat_template"), std::string::npos);
  for (const char* bad : {R"({"messages": []})", R"({"messages": [{"content": "x"}]})",
                          R"({"messages": [{"role": "user", "content": 5}]})",
                          R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(err(parse_chat_request(bad, limits(&codec))).param, "messages");
  }
}

TEST(ServerApiRequest, TokenizeAndDetokenize) {
  test::ByteCodec codec;
  auto t = parse_tokenize_request(R"({"prompt": "hi", "add_special_tokens": false})", limits(&codec));
  ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(t));
  EXPECT_EQ(std::get<TokenizeRequest>(t).tokens, (std::vector<int32_t>{'h' + 1, 'i' + 1}));
  auto d = parse_detokenize_request(R"({"tokens": [105, 106]})", limits(&codec));
  ASSERT_TRUE(std::holds_alternative<DetokenizeRequest>(d));
  EXPECT_EQ(std::get<DetokenizeRequest>(d).tokens, (std::vector<int32_t>{105, 106}));
  auto bad = parse_detokenize_request(R"({"tokens": [1, 300]})", limits(&codec));
  ASSERT_TRUE(std::holds_alternative<ApiError>(bad));
  EXPECT_NE(std::get<ApiError>(bad).message.find("outside the vocabulary"), std::string::npos);
  auto none = parse_tokenize_request(R"({"prompt": "hi"})", limits());
  ASSERT_TRUE(std::holds_alternative<ApiError>(none));
  EXPECT_NE(std::get<ApiError>(none).message.find("no tokenizer"), std::string::npos);
}

}  // namespace
}  // namespace parity::server
