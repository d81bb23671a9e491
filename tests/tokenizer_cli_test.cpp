// Text in and out through the `parity` binary: tokenize / detokenize, and --prompt-text,
// --forced-text, --text and .txt files giving the same runs as the ids they encode to.
#include <algorithm>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "test_support.h"
#include "tokenizer/tokenizer.h"

namespace parity {
namespace {

namespace fs = std::filesystem;

// Single quotes for the shell (the texts below have no single quote).
std::string q(const std::string& s) { return "'" + s + "'"; }

class TokenizerCli : public ::testing::Test {
 protected:
  fs::path dir = test::scratch_dir("tokenizer_cli");
  void TearDown() override { fs::remove_all(dir); }
};

TEST_F(TokenizerCli, TokenizeAndDetokenizeRoundTrip) {
  const std::string text = "Hello, wörld!  Tabs\tand 🙂 emoji.";
  auto r = test::run_cli("tokenize builtin:tiny --text " + q(text));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto ids = nlohmann::json::parse(r.out).get<std::vector<int32_t>>();
  EXPECT_EQ(ids, tokenizer::load_for_model("builtin:tiny")->encode(text));
  r = test::run_cli("detokenize builtin:tiny --tokens " + test::id_list(ids));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, text);
  test::write_text(dir / "in.txt", text + "\n");
  r = test::run_cli("tokenize builtin:tiny --file " + (dir / "in.txt").string());
  ASSERT_EQ(r.status, 0) << r.err;
  const auto with_newline = tokenizer::load_for_model("builtin:tiny")->encode(text + "\n");
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(), with_newline);
}

TEST_F(TokenizerCli, ExportedBuiltinModelCarriesItsTokenizer) {
  const std::string folder = (dir / "tiny").string();
  ASSERT_EQ(test::run_cli("export builtin:tiny --out " + folder).status, 0);
  auto a = test::run_cli("tokenize " + folder + " --text " + q("Hello there"));
  auto b = test::run_cli("tokenize builtin:tiny --text " + q("Hello there"));
  ASSERT_EQ(a.status, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(tokenizer::load_for_model(folder)->eos_token_id(), std::optional<int32_t>(0));
}

TEST_F(TokenizerCli, CheckpointFolderTokenizerAndSpecialTokens) {
  const std::string folder = std::string(PARITY_TEST_DATA) + "/tokenizer_bpe/granite";
  auto r = test::run_cli("tokenize " + folder + " --text " + q("Hi there"));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto ids = nlohmann::json::parse(r.out).get<std::vector<int32_t>>();
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], 1);  // the template's <|begin_of_text|>
  r = test::run_cli("tokenize " + folder + " --no-special-tokens --text " + q("Hi there"));
  EXPECT_EQ(nlohmann::json::parse(r.out).get<std::vector<int32_t>>(), std::vector<int32_t>(ids.begin() + 1, ids.end()));
  r = test::run_cli("detokenize " + folder + " --skip-special-tokens --tokens " + test::id_list(ids));
  EXPECT_EQ(r.out, "Hi there");
  r = test::run_cli("detokenize " + folder + " --tokens " + test::id_list(ids));
  EXPECT_EQ(r.out, "<|begin_of_text|>Hi there");
}

TEST_F(TokenizerCli, NoTokenizerIsAClearError) {
  const std::string folder = std::string(PARITY_TEST_DATA) + "/mamba2_g1";
  for (const std::string& cmd : std::vector<std::string>{"tokenize " + folder + " --text hi", "detokenize " + folder + " --tokens 1,2",
                                "generate " + folder + " --prompt-text hi --max-tokens 2"}) {
    auto r = test::run_cli(cmd);
    EXPECT_NE(r.status, 0) << cmd;
    EXPECT_NE(r.err.find("has no tokenizer.json"), std::string::npos) << r.err;
  }
  auto r = test::run_cli("tokenize builtin:tiny");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("--text or --file"), std::string::npos) << r.err;
  r = test::run_cli("generate builtin:tiny --prompt 1,2 --prompt-text hi --max-tokens 2");
  EXPECT_NE(r.status, 0);
  r = test::run_cli("tokenize builtin:tiny --text $(printf '\\377')");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("not valid UTF-8"), std::string::npos) << r.err;
}

TEST_F(TokenizerCli, TextFlagsGiveTheSameRunAsIds) {
  auto tok = tokenizer::load_for_model("builtin:tiny");
  const std::string prompt = "Once upon a time there was", forced = " a small machine";
  const auto p_ids = tok->encode(prompt), f_ids = tok->encode(forced, false);
  auto a = test::run_cli("generate builtin:tiny --exact --prompt-text " + q(prompt) + " --forced-text " + q(forced));
  auto b = test::run_cli("generate builtin:tiny --exact --prompt " + test::id_list(p_ids) + " --forced " +
                         test::id_list(f_ids));
  ASSERT_EQ(a.status, 0) << a.err;
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  const nlohmann::json out = nlohmann::json::parse(a.out);
  EXPECT_EQ(out["tokens"].get<std::vector<int32_t>>(), f_ids);
  EXPECT_EQ(out["text"], forced);

  test::write_text(dir / "p.txt", prompt);
  auto c = test::run_cli("generate builtin:tiny --prompt " + (dir / "p.txt").string() + " --max-tokens 5");
  auto d = test::run_cli("generate builtin:tiny --prompt " + test::id_list(p_ids) + " --max-tokens 5");
  ASSERT_EQ(c.status, 0) << c.err;
  EXPECT_EQ(c.out, d.out);
  const nlohmann::json gen = nlohmann::json::parse(c.out);
  EXPECT_EQ(gen["text"], tok->decode(gen["tokens"].get<std::vector<int32_t>>(), true));

  const std::string s1 = (dir / "s1.st").string(), s2 = (dir / "s2.st").string();
  ASSERT_EQ(test::run_cli("score builtin:tiny --text " + q(prompt) + " --out " + s1).status, 0);
  ASSERT_EQ(test::run_cli("score builtin:tiny --tokens " + test::id_list(p_ids) + " --out " + s2).status, 0);
  auto f1 = io::SafetensorsFile::open(s1), f2 = io::SafetensorsFile::open(s2);
  const io::TensorView *l1 = f1->find("logits"), *l2 = f2->find("logits");
  ASSERT_TRUE(l1 && l2);
  ASSERT_EQ(l1->nbytes, l2->nbytes);
  EXPECT_EQ(l1->shape[0], static_cast<int64_t>(p_ids.size()));
  EXPECT_EQ(std::memcmp(l1->data, l2->data, l1->nbytes), 0);
}

// generate stops at the tokenizer's EOS (id 0 in the built-in tokenizer), as vLLM does, unless
// --ignore-eos; the companion run shows the sampled stream does reach EOS and continues past it.
TEST_F(TokenizerCli, GenerateStopsAtEosUnlessIgnoreEos) {
  auto tok = tokenizer::load_for_model("builtin:tiny");
  ASSERT_TRUE(tok->eos_token_id().has_value());
  const int32_t eos = *tok->eos_token_id();
  const std::string cmd = "generate builtin:tiny --prompt-text hello --max-tokens 200 --temperature 2 --seed 10";
  auto full = test::run_cli(cmd + " --ignore-eos");
  auto stopped = test::run_cli(cmd);
  ASSERT_EQ(full.status, 0) << full.err;
  ASSERT_EQ(stopped.status, 0) << stopped.err;
  const auto all = nlohmann::json::parse(full.out)["tokens"].get<std::vector<int32_t>>();
  const nlohmann::json s = nlohmann::json::parse(stopped.out);
  const auto cut = s["tokens"].get<std::vector<int32_t>>();
  const auto at = std::find(all.begin(), all.end(), eos);
  ASSERT_NE(at, all.end()) << "seed 10 no longer samples EOS within 200 tokens: pick another seed";
  ASSERT_LT(at + 1, all.end()) << "the companion must continue past EOS";
  EXPECT_EQ(cut, std::vector<int32_t>(all.begin(), at + 1));
  EXPECT_EQ(s["finish_reason"], "stop");
  EXPECT_EQ(nlohmann::json::parse(full.out)["finish_reason"], "length");
  // Teacher forcing never stops early, EOS or not.
  auto forced = test::run_cli("generate builtin:tiny --prompt-text hello --forced " + test::id_list(all));
  ASSERT_EQ(forced.status, 0) << forced.err;
  EXPECT_EQ(nlohmann::json::parse(forced.out)["tokens"].get<std::vector<int32_t>>(), all);
}

}  // namespace
}  // namespace parity
