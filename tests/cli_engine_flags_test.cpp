// The engine flags every command that runs the model registers through one helper
// (frontends/cli/engine_flags.h): each command offers its own set with the same help, the values
// reach the engine, and a bad configuration is refused before the model is looked for.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.h"

using namespace parity;

namespace {

// The help line of FLAG in `parity CMD --help`, or "" when CMD does not offer it. CLI11 puts a
// long description on the line after the flag's own.
std::string help_of(const std::string& help, const std::string& flag) {
  std::size_t at = 0;
  while ((at = help.find("  " + flag, at)) != std::string::npos) {
    const std::size_t after = at + 2 + flag.size();
    if (after < help.size() && (help[after] == ' ' || help[after] == '\n' || help[after] == ',')) break;
    at = after;
  }
  if (at == std::string::npos) return "";
  const std::size_t end = help.find('\n', at);
  std::string line = help.substr(at, end - at);
  const std::size_t next_end = help.find('\n', end + 1);
  const std::string next = help.substr(end + 1, next_end - end - 1);
  if (next.rfind("      ", 0) == 0) line += next;  // the description, indented under the flag
  return line;
}

TEST(CliEngineFlags, EachCommandOffersItsFlagsWithOneHelp) {
  const std::vector<std::string> flags = {"--device",        "--exact",           "--enable-prefix-caching",
                                          "--max-num-batched-tokens", "--max-num-seqs", "--max-model-len",
                                          "--state-memory-mb", "--preempt-at-step", "--threads",
                                          "--additional-config", "--moe-routing"};
  // 1: offered. verify's own --exact-… and --enable-prefix-caching flags are not the engine's.
  const std::map<std::string, std::vector<int>> offered = {
      {"generate", {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}}, {"serve", {1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1}},
      {"capture", {1, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1}},  {"validate", {1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1}},
      {"score", {1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1}},     {"verify", {1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1}}};
  std::map<std::string, std::string> help;
  for (const auto& [cmd, _] : offered) {
    const auto r = test::run_cli(cmd + " --help");
    ASSERT_EQ(r.status, 0) << r.err;
    help[cmd] = r.out;
  }
  for (const auto& [cmd, on] : offered)
    for (std::size_t i = 0; i < flags.size(); ++i)
      EXPECT_EQ(!help_of(help[cmd], flags[i]).empty(), on[i] == 1) << cmd << " " << flags[i];

  EXPECT_EQ(help_of(help["generate"], "--max-num-batched-tokens"),
            "  --max-num-batched-tokens INT:INT in [1 - 16777216]                              token budget per pass");
  for (const char* cmd : {"serve", "capture", "validate"})
    EXPECT_EQ(help_of(help[cmd], "--max-num-batched-tokens"), help_of(help["generate"], "--max-num-batched-tokens"))
        << cmd;
  for (const char* cmd : {"capture", "validate", "score"})
    EXPECT_EQ(help_of(help[cmd], "--threads"), help_of(help["generate"], "--threads")) << cmd;
  EXPECT_EQ(help_of(help["verify"], "--moe-routing"), help_of(help["generate"], "--moe-routing"));
  // Where a command's meaning differs, so does its help.
  EXPECT_NE(help_of(help["serve"], "--max-model-len").find("longest request: prompt + max_tokens (default 4096)"),
            std::string::npos);
  EXPECT_NE(help_of(help["serve"], "--threads").find("worker threads of the engine"), std::string::npos);
  EXPECT_NE(help_of(help["capture"], "--additional-config").find("replacement active while capturing"),
            std::string::npos);
  EXPECT_EQ(help_of(help["generate"], "--additional-config").find("while capturing"), std::string::npos);
}

TEST(CliEngineFlags, SchedulerFlagsReachTheEngine) {
  const std::string base = "generate builtin:tiny --exact --prompt 1,2,3,4,5,6,7 --add-prompt 9,8,7,6 --max-tokens 5";
  const auto free = test::run_cli(base);
  const auto tight = test::run_cli(base + " --max-num-seqs 1 --max-num-batched-tokens 3 --preempt-at-step 2");
  ASSERT_EQ(free.status, 0) << free.err;
  ASSERT_EQ(tight.status, 0) << tight.err;
  const auto a = nlohmann::json::parse(free.out), b = nlohmann::json::parse(tight.out);
  EXPECT_EQ(a["steps"], 5);
  EXPECT_EQ(b["steps"], 14);  // one sequence, three tokens a pass, the first request preempted once
  EXPECT_EQ(a["requests"][0]["preemptions"], 0);
  EXPECT_EQ(b["requests"][0]["preemptions"], 1);
  EXPECT_EQ(b["requests"][1]["preemptions"], 0);  // it waited: not running at step 2
  // Exact mode: the same tokens however the requests were scheduled.
  EXPECT_EQ(a["requests"][0]["tokens"], nlohmann::json::parse("[424,238,85,308,68]"));
  EXPECT_EQ(a["requests"][1]["tokens"], nlohmann::json::parse("[456,505,121,402,120]"));
  EXPECT_EQ(b["tokens"], a["tokens"]);
  EXPECT_EQ(b["requests"][1]["tokens"], a["requests"][1]["tokens"]);

  const auto too_long = test::run_cli("generate builtin:tiny --prompt 1,2,3,4,5,6 --max-tokens 5 --max-model-len 8");
  EXPECT_EQ(too_long.status, 1);
  EXPECT_NE(too_long.err.find("error: request rejected: prompt + continuation is 11 tokens, more than max_model_len 8"),
            std::string::npos)
      << too_long.err;
}

TEST(CliEngineFlags, ABadConfigurationIsRefusedBeforeTheModelIsLookedFor) {
  const std::string bad = " --additional-config '{\"x\":1}'";
  const std::string msg = "error: --additional-config: unknown key \"x\" in the top level (known: tensor_replacement)";
  for (const std::string args : {"generate /nonexistent --prompt 1,2 --max-tokens 2",
                                 "capture /nonexistent --prompt 1,2 --modules x --out /nonexistent/x",
                                 "validate /nonexistent --reference /nonexistent/ref",
                                 "score /nonexistent --tokens 1,2 --out /nonexistent/x",
                                 "serve /nonexistent --port 0"}) {
    const auto r = test::run_cli(args + bad);
    EXPECT_EQ(r.status, 1) << args;
    EXPECT_NE(r.err.find(msg), std::string::npos) << args << ": " << r.err;
  }
  // A share of a GPU's memory needs a model on a GPU; the flag is where --state-memory-mb is.
  const auto gpu = test::run_cli("generate builtin:tiny --prompt 1,2 --max-tokens 2 --gpu-memory-utilization 0.9");
  EXPECT_EQ(gpu.status, 1);
  EXPECT_NE(gpu.err.find("error: --gpu-memory-utilization sizes the caches of a model on a GPU; builtin:tiny runs on "
                         "cpu (use --state-memory-mb)"),
            std::string::npos)
      << gpu.err;
  const auto both =
      test::run_cli("serve builtin:tiny --port 0 --state-memory-mb 64 --gpu-memory-utilization 0.5");
  EXPECT_EQ(both.status, 1);
  EXPECT_NE(both.err.find("not both"), std::string::npos) << both.err;
  const auto r = test::run_cli("generate /nonexistent --prompt 1,2 --max-tokens 2 --exact-grid 16");
  EXPECT_NE(r.err.find("error: --exact-grid and --exact-stagger choose exact mode's grid: add --exact"),
            std::string::npos)
      << r.err;
}

}  // namespace
