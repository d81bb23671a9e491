// The tokenizer on hand-made tokenizer.json files whose ids can be worked out by hand: merge
// order, added-token flags, the template post-processor, streaming decode that ends inside a
// UTF-8 character, the built-in tokenizer, and an error naming every unsupported part.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "model/builtin.h"
#include "tokenizer/builtin_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

namespace parity {
namespace {

using tokenizer::StreamDecoder;
using tokenizer::Tokenizer;
using Ids = std::vector<int32_t>;

// Vocab: a b c Ġ (byte-level space) and the merges "a b" (rank 0), "ab c" (1), "Ġ a" (2).
nlohmann::json tiny_json() {
  return nlohmann::json::parse(R"({
    "version": "1.0",
    "added_tokens": [
      {"id": 9, "content": "<|endoftext|>", "special": true, "normalized": false,
       "lstrip": false, "rstrip": false, "single_word": false}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "\u0120": 3, "ab": 4, "abc": 5, "\u0120a": 6,
                                        "<|endoftext|>": 9},
              "merges": ["a b", ["ab", "c"], "\u0120 a"]}
  })");
}

std::unique_ptr<Tokenizer> tokenizer_from(const nlohmann::json& j) { return Tokenizer::from_json(j.dump(), "test"); }

TEST(Tokenizer, MergesLowestRankFirstInBothForms) {
  auto t = tokenizer_from(tiny_json());
  // "abc": a b c → ab c (rank 0) → abc (rank 1).
  EXPECT_EQ(t->encode("abc"), (Ids{5}));
  // " abc": Ġ a b c: "a b" (rank 0) beats "Ġ a" (rank 2), then "ab c": Ġ abc.
  EXPECT_EQ(t->encode(" abc"), (Ids{3, 5}));
  // " a": Ġ a → Ġa.
  EXPECT_EQ(t->encode(" a b"), (Ids{6, 3, 1}));
  EXPECT_EQ(t->encode("abc<|endoftext|>ab"), (Ids{5, 9, 4}));
  EXPECT_EQ(t->decode({5, 9, 4}), "abc<|endoftext|>ab");
  EXPECT_EQ(t->decode({5, 9, 4}, true), "abcab");
  EXPECT_EQ(t->decode({5, 1234, 4}), "abcab");  // ids without a token are skipped, as HF does
  EXPECT_EQ(t->vocab_size(), 10);
  EXPECT_EQ(t->token_to_id("\u0120a"), std::optional<int32_t>(6));
  EXPECT_EQ(t->id_to_token(9), std::optional<std::string>("<|endoftext|>"));
  EXPECT_FALSE(t->id_to_token(7).has_value());
  EXPECT_EQ(t->eos_token_id(), std::optional<int32_t>(9));  // <|endoftext|> without a config
  EXPECT_FALSE(t->bos_token_id().has_value());
}

TEST(Tokenizer, NoDecoderJoinsTokensWithSpacesAlsoWhenStreaming) {
  nlohmann::json j = tiny_json();
  j["decoder"] = nullptr;
  auto t = tokenizer_from(j);
  EXPECT_EQ(t->decode({5, 9, 4}), "abc <|endoftext|> ab");
  EXPECT_EQ(t->decode({9, 5, 4}, true), "abc ab");
  StreamDecoder sd(*t, true);
  EXPECT_EQ(sd.push(9), "");  // skipped: the next token is still the first one kept
  EXPECT_EQ(sd.push(5), "abc");
  EXPECT_EQ(sd.push(4), " ab");
}

TEST(Tokenizer, ConcurrentEncodesAgree) {
  // encode is const and shared by server threads: the word cache is the only mutable state.
  auto t = tokenizer::load_for_model("builtin:tiny");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "word" + std::to_string(i % 37) + " and more text, " + std::to_string(i) + "\n";
  const Ids expect = tokenizer::load_for_model("builtin:tiny")->encode(text);
  std::vector<Ids> got(4);
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k)
    threads.emplace_back([&, k] {
      for (int rep = 0; rep < 5; ++rep) got[k] = t->encode(text);
    });
  for (auto& th : threads) th.join();
  for (const Ids& g : got) EXPECT_EQ(g, expect);
}

TEST(Tokenizer, AddedTokenFlags) {
  nlohmann::json j = tiny_json();
  j["model"]["vocab"]["<m>"] = 10;
  j["model"]["vocab"]["c"] = 2;
  j["added_tokens"].push_back({{"id", 10}, {"content", "<m>"}, {"special", true}, {"normalized", false},
                               {"lstrip", true}, {"rstrip", true}, {"single_word", false}});
  j["added_tokens"].push_back({{"id", 4}, {"content", "ab"}, {"special", false}, {"normalized", true},
                               {"lstrip", false}, {"rstrip", false}, {"single_word", true}});
  auto t = tokenizer_from(j);
  // lstrip / rstrip take the spaces around <m> into the token.
  EXPECT_EQ(t->encode("a  <m>  c"), (Ids{0, 10, 2}));
  // single_word: "ab" alone is the added token; inside "abc" it is not (BPE makes abc).
  EXPECT_EQ(t->encode("ab"), (Ids{4}));
  EXPECT_EQ(t->encode("abc"), (Ids{5}));
}

TEST(Tokenizer, TemplateAddsBosAndConfigNamesTokens) {
  nlohmann::json j = tiny_json();
  j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing",
      "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
      "pair": [], "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [9], "tokens": ["<|endoftext|>"]}}})");
  auto t = tokenizer_from(j);
  EXPECT_EQ(t->encode("abc"), (Ids{9, 5}));
  EXPECT_EQ(t->encode("abc", false), (Ids{5}));
  EXPECT_EQ(t->encode(""), (Ids{9}));
  EXPECT_EQ(t->bos_token_id(), std::optional<int32_t>(9));
}

TEST(Tokenizer, NfcNormalizerChangesIdsOfDecomposedText) {
  // Companion to the fixture test: without the NFC normalizer the same text gives other ids, so
  // equality with HF's ids is a real check of normalization.
  auto with = Tokenizer::from_file(std::string(PARITY_TEST_DATA) + "/tokenizer_bpe/neox/tokenizer.json");
  nlohmann::json j = nlohmann::json::parse(
      std::ifstream(std::string(PARITY_TEST_DATA) + "/tokenizer_bpe/neox/tokenizer.json"));
  j["normalizer"] = nullptr;
  auto without = tokenizer_from(j);
  EXPECT_NE(with->encode("cafe\u0301"), without->encode("cafe\u0301"));
  EXPECT_EQ(with->encode("caf\u00e9"), without->encode("caf\u00e9"));
  EXPECT_EQ(with->encode("cafe\u0301"), with->encode("caf\u00e9"));
}

// Byte tokens of "é" (C3 A9) and "🙂" (F0 9F 99 82) from the byte-level map.
TEST(Tokenizer, StreamingHoldsBackAPartialCharacter) {
  auto t = tokenizer::load_for_model("builtin:tiny");
  auto byte_id = [&](unsigned char b) {
    // ids 1-256 are the bytes in the built-in tokenizer
    return static_cast<int32_t>(b) + 1;
  };
  const std::string text = "x\xC3\xA9\xF0\x9F\x99\x82!";
  Ids ids;
  for (unsigned char b : text) ids.push_back(byte_id(b));
  StreamDecoder sd(*t);
  std::vector<std::string> parts;
  for (int32_t id : ids) parts.push_back(sd.push(id));
  EXPECT_EQ(parts, (std::vector<std::string>{"x", "", "\xC3\xA9", "", "", "", "\xF0\x9F\x99\x82", "!"}));
  EXPECT_EQ(sd.flush(), "");
  EXPECT_EQ(t->decode(ids), text);

  // A sequence that ends inside a character: flush gives one U+FFFD for the partial character,
  // as the whole-sequence decode does.
  StreamDecoder cut(*t);
  EXPECT_EQ(cut.push(byte_id('a')), "a");
  EXPECT_EQ(cut.push(byte_id(0xF0)), "");
  EXPECT_EQ(cut.push(byte_id(0x9F)), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(t->decode({byte_id('a'), byte_id(0xF0), byte_id(0x9F)}), "a\xEF\xBF\xBD");
  // A byte that cannot continue the pending one: each invalid part becomes U+FFFD at once.
  StreamDecoder bad(*t);
  EXPECT_EQ(bad.push(byte_id(0xE2)), "");
  EXPECT_EQ(bad.push(byte_id('b')), "\xEF\xBF\xBD" "b");
  EXPECT_EQ(bad.push(byte_id(0x80)), "\xEF\xBF\xBD");
}

TEST(Tokenizer, RoundTripsAndLongInputs) {
  auto t = tokenizer::load_for_model("builtin:mamba2-130m");
  for (const std::string& s : std::vector<std::string>{"Hello, world!", "  two  spaces\tand\ttabs\n\n", "日本語 🙂 👩‍💻 ñ",
                              "don't stop: 1234567 × 2", std::string(1, '\0') + "nul"}) {
    EXPECT_EQ(t->decode(t->encode(s)), s) << s;
  }
  // 100 KB in one word and 100 KB of prose: the heap merge keeps these cheap; ids round-trip.
  const std::string word(100000, 'a');
  EXPECT_EQ(t->decode(t->encode(word)), word);
  std::string prose;
  while (prose.size() < 100000) prose += "The model reads a prompt and writes a continuation, 42 times. ";
  const Ids ids = t->encode(prose);
  EXPECT_LT(ids.size(), prose.size() / 2);
  EXPECT_EQ(t->decode(ids), prose);
  EXPECT_THROW(t->encode("bad \xC3 byte"), Error);
}

TEST(Tokenizer, BuiltinMatchesEveryBuiltinModelAndIsDeterministic) {
  for (const std::string& name : model::builtin_names()) {
    auto t = tokenizer::load_for_model("builtin:" + name);
    ASSERT_TRUE(t) << name;
    EXPECT_EQ(t->vocab_size(), model::builtin_vocab_size(name)) << name;
    EXPECT_EQ(t->eos_token_id(), std::optional<int32_t>(0));
    EXPECT_EQ(t->decode(t->encode("Hello, world!")), "Hello, world!");
    // Every id decodes to something (no holes a sampled id could fall into).
    EXPECT_TRUE(t->id_to_token(model::builtin_vocab_size(name) - 1).has_value()) << name;
  }
  EXPECT_EQ(tokenizer::builtin_tokenizer_json(512), tokenizer::builtin_tokenizer_json(512));
  auto t = tokenizer::load_for_model("builtin:tiny");
  EXPECT_LT(t->encode("The model reads a prompt").size(), 10u);  // merges learned, not bytes
}

TEST(Tokenizer, ModelFolderWithoutTokenizerIsNull) {
  EXPECT_EQ(tokenizer::load_for_model(std::string(PARITY_TEST_DATA) + "/mamba2_g1"), nullptr);
  EXPECT_THROW(tokenizer::load_for_model("builtin:nope"), Error);
}

void expect_refused(const nlohmann::json& j, const std::string& needle) {
  try {
    tokenizer_from(j);
    ADD_FAILURE() << "accepted; expected an error naming " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, RefusesWhatItDoesNotSupportNamingIt) {
  auto with = [](const char* key, const char* value) {
    nlohmann::json j = tiny_json();
    j[key] = nlohmann::json::parse(value);
    return j;
  };
  expect_refused(with("normalizer", R"({"type": "Lowercase"})"), "unsupported normalizer 'Lowercase'");
  expect_refused(with("pre_tokenizer", R"({"type": "Whitespace"})"), "unsupported pre-tokenizer 'Whitespace'");
  expect_refused(with("pre_tokenizer", R"({"type": "Sequence", "pretokenizers": [{"type": "Metaspace"}]})"),
                 "unsupported pre-tokenizer 'Metaspace'");
  expect_refused(with("decoder", R"({"type": "WordPiece"})"), "unsupported decoder 'WordPiece'");
  expect_refused(with("post_processor", R"({"type": "BertProcessing"})"), "unsupported post-processor 'BertProcessing'");
  expect_refused(with("pre_tokenizer", R"({"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"})"),
                 "unsupported split behavior 'Sideways'");
  expect_refused(with("pre_tokenizer", R"({"type": "Split", "pattern": {"Regex": "(a"}, "behavior": "Isolated"})"),
                 "does not compile");
  expect_refused(with("pre_tokenizer", R"({"type": "Split", "pattern": {"Regex": "[\\S]"}, "behavior": "Isolated"})"),
                 "inside a character class");
  // \C (one byte) could cut a character in two: refused by PCRE2 at compile time.
  expect_refused(with("pre_tokenizer", R"({"type": "Split", "pattern": {"Regex": "\\C"}, "behavior": "Isolated"})"),
                 "does not compile");
  nlohmann::json j = tiny_json();
  j["model"]["type"] = "Unigram";
  expect_refused(j, "unsupported model type 'Unigram'");
  for (const auto& [key, value] : std::vector<std::pair<const char*, nlohmann::json>>{
           {"dropout", 0.1}, {"byte_fallback", true}, {"continuing_subword_prefix", "##"}, {"end_of_word_suffix", "</w>"}}) {
    j = tiny_json();
    j["model"][key] = value;
    expect_refused(j, std::string("unsupported BPE option \"") + key + "\"");
  }
  j = tiny_json();
  j["model"]["merges"].push_back("c d");
  expect_refused(j, "'d' is not in the vocab");
  j = tiny_json();
  j["model"]["merges"].push_back("b c");
  expect_refused(j, "merged token 'bc' is not in the vocab");
  j = tiny_json();
  j["model"]["merges"].push_back("a b c");
  expect_refused(j, "not two tokens separated by one space");
  j = tiny_json();
  j["added_tokens"][0]["id"] = 12;
  expect_refused(j, "would give it id 9");
  j = tiny_json();
  j["post_processor"] = nlohmann::json::parse(R"({"type": "TemplateProcessing", "single": [{"Sequence": {"id": "B"}}], "special_tokens": {}})");
  expect_refused(j, "sequence 'B'");
  try {
    Tokenizer::from_json("{\"model\": ", "broken.json");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("broken.json: not valid JSON"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, OnigurumaWhitespaceNotPcre2s) {
  // PCRE2 10.42's \s matches U+180E (no longer white space since Unicode 6.3); Oniguruma's and
  // Rust's do not. The ByteLevel regex keeps it with the letters around it like any symbol.
  tokenizer::Regex plain_check("\\s", "test");
  EXPECT_EQ(plain_check.find_all("a\xE1\xA0\x8E" "b c").size(), 1u);
  EXPECT_EQ(plain_check.find_all("\xC2\x85").size(), 1u);  // NEL is White_Space
}

}  // namespace
}  // namespace parity
