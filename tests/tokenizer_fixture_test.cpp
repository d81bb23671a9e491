// Ids and decodes equal Hugging Face tokenizers' on the fixtures in tests/data/tokenizer_bpe/
// (made by tools/make_tokenizer_fixture.py: three small byte-level BPE tokenizers trained by HF,
// shaped like GPT-NeoX / Mamba2, Granite and StarCoder-style Digits tokenizers; ~400 tricky and
// random strings each, plus a 50 KB input). A missing fixture fails the test.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

namespace parity {
namespace {

namespace fs = std::filesystem;

const fs::path kDir = fs::path(PARITY_TEST_DATA) / "tokenizer_bpe";

nlohmann::json read_fixture(const std::string& kind) {
  std::ifstream f(kDir / kind / "fixture.json");
  if (!f) return nullptr;
  return nlohmann::json::parse(f);
}

std::string show(const std::string& s) { return nlohmann::json(s).dump(-1, ' ', true).substr(0, 120); }

class TokenizerFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerFixture, IdsAndDecodesEqualHuggingFace) {
  const std::string kind = GetParam();
  const nlohmann::json fx = read_fixture(kind);
  ASSERT_FALSE(fx.is_null()) << "missing fixture " << (kDir / kind / "fixture.json")
                             << " (make it with tools/make_tokenizer_fixture.py)";
  auto tok = tokenizer::Tokenizer::from_file((kDir / kind / "tokenizer.json").string());
  EXPECT_EQ(tok->vocab_size(), fx["vocab_size"].get<int>());
  EXPECT_EQ(tok->eos_token_id(), std::optional<int32_t>(fx["eos_token_id"].get<int32_t>()));
  if (fx["bos_token_id"].is_null())
    EXPECT_FALSE(tok->bos_token_id().has_value());
  else
    EXPECT_EQ(tok->bos_token_id(), std::optional<int32_t>(fx["bos_token_id"].get<int32_t>()));
  EXPECT_TRUE(tok->chat_template().has_value());

  int failures = 0, checked = 0;
  for (const auto& c : fx["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto ids_plain = c["ids_no_special"].get<std::vector<int32_t>>();
    const auto got = tok->encode(text, true);
    const auto got_plain = tok->encode(text, false);
    ++checked;
    if (got != ids || got_plain != ids_plain) {
      if (++failures <= 10) ADD_FAILURE() << kind << ": ids differ for " << show(text) << "\n  HF:     "
                                          << nlohmann::json(ids).dump().substr(0, 300) << "\n  parity: "
                                          << nlohmann::json(got).dump().substr(0, 300);
      continue;
    }
    EXPECT_EQ(tok->decode(ids, false), c["decoded"].get<std::string>()) << show(text);
    EXPECT_EQ(tok->decode(ids, true), c["decoded_skip_special"].get<std::string>()) << show(text);
    // Streaming one id at a time gives the same text.
    for (bool skip : {false, true}) {
      tokenizer::StreamDecoder sd(*tok, skip);
      std::string streamed;
      for (int32_t id : ids) streamed += sd.push(id);
      streamed += sd.flush();
      EXPECT_EQ(streamed, c[skip ? "decoded_skip_special" : "decoded"].get<std::string>()) << show(text);
    }
  }
  EXPECT_EQ(failures, 0) << kind << ": " << failures << " of " << checked << " cases differ";
  EXPECT_GT(checked, 300);
  for (const auto& c : fx["decode_cases"]) {
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->decode(ids, false), c["decoded"].get<std::string>()) << nlohmann::json(ids).dump();
    EXPECT_EQ(tok->decode(ids, true), c["decoded_skip_special"].get<std::string>()) << nlohmann::json(ids).dump();
    tokenizer::StreamDecoder sd(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    EXPECT_EQ(streamed, c["decoded"].get<std::string>()) << nlohmann::json(ids).dump();
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, TokenizerFixture, ::testing::Values("neox", "granite", "digits", "behaviors"));

}  // namespace
}  // namespace parity
