// `parity generate` with prefix caching and speculative decoding: the JSON reports, the same tokens
// as without the features (exact mode), and bad combinations refused with a message.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

using namespace parity;

namespace {

nlohmann::json run_json(const std::string& args) {
  const auto r = test::run_cli(args);
  EXPECT_EQ(r.status, 0) << r.err;
  return r.status == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

std::string shared_prefix_prompt(int shared, int tail_from) {
  std::string p;
  for (int i = 0; i < shared; ++i) p += std::to_string(1 + (i * 7) % 500) + ",";
  for (int i = 0; i < 5; ++i) p += std::to_string(tail_from + i) + (i < 4 ? "," : "");
  return p;
}

TEST(CliServingFlags, PrefixCachingReportsHitsAndKeepsTheTokens) {
  const std::string base = "generate builtin:tiny --exact --max-tokens 6 --max-num-seqs 1 --prompt " +
                           shared_prefix_prompt(40, 100) + " --add-prompt " + shared_prefix_prompt(40, 200) +
                           " --add-prompt " + shared_prefix_prompt(40, 300);
  const auto off = run_json(base);
  const auto on = run_json(base + " --enable-prefix-caching --prefix-block-tokens 16");
  ASSERT_TRUE(on.contains("prefix_cache"));
  EXPECT_FALSE(off.contains("prefix_cache"));
  const auto& pc = on["prefix_cache"];
  EXPECT_EQ(pc["lookups"], 3);
  EXPECT_EQ(pc["hits"], 2);
  EXPECT_EQ(pc["hit_tokens"], 2 * 32);
  EXPECT_GT(pc["cached_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(pc["block_tokens"], 16);
  ASSERT_EQ(on["requests"].size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) EXPECT_EQ(on["requests"][i]["tokens"], off["requests"][i]["tokens"]);
  EXPECT_EQ(on["tokens"], off["tokens"]);
}

TEST(CliServingFlags, SpeculativeDecodingReportsAcceptanceAndKeepsTheTokens) {
  const std::string base = "generate builtin:tiny --exact --max-tokens 40 --prompt 1,2,3,4,5,1,2,3,4,5,1,2,3";
  const auto off = run_json(base);
  const auto ngram = run_json(base + " --speculative-tokens 4");
  const auto draft = run_json(base + " --speculative-tokens 4 --speculative-method draft --draft-model builtin:tiny");
  for (const auto* j : {&ngram, &draft}) {
    ASSERT_TRUE(j->contains("speculative"));
    EXPECT_EQ((*j)["tokens"], off["tokens"]);
    EXPECT_EQ((*j)["speculative"]["num_tokens"], 4);
  }
  EXPECT_EQ(draft["speculative"]["method"], "draft");
  // The target as its own draft model agrees with itself: every draft accepted, far fewer steps.
  EXPECT_EQ(draft["speculative"]["acceptance_rate"], 1.0);
  EXPECT_LT(draft["steps"].get<int>(), off["steps"].get<int>() / 2);
}

TEST(CliServingFlags, BadCombinationsAreRefused) {
  const std::string base = "generate builtin:tiny --max-tokens 4 --prompt 1,2,3 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--speculative-method draft --speculative-tokens 2", "--draft-model"},
      {"--draft-model builtin:tiny", "--speculative-method draft"},
      {"--speculative-method draft --draft-model builtin:tiny", "--speculative-tokens"},
      {"--speculative-tokens 2 --speculative-method draft --draft-model " + std::string(PARITY_TEST_DATA) +
           "/mamba2_g1",  // another vocabulary
       "vocabulary"},
      {"--speculative-tokens 2 --ngram-min 3 --ngram-max 2", "--ngram-min"},
      {"--speculative-tokens 65", "--speculative-tokens"},
      {"--enable-prefix-caching --prefix-block-tokens 0", "--prefix-block-tokens"}};
  for (const auto& [bad, named] : cases) {
    SCOPED_TRACE(bad);
    const auto r = test::run_cli(base + bad);
    EXPECT_NE(r.status, 0);
    EXPECT_LT(r.status, 128);  // an error, not a crash
    EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
  }
}

}  // namespace
