// Replays every seed (fuzz/corpus/<target>/) and every crash input libFuzzer found and that was
// fixed (fuzz/regressions/<target>/) through the same entry functions, compiled without libFuzzer,
// so the normal and the sanitizer test runs keep them fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>

#include "fuzz_target.h"

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string()[0] != '.') out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

const parity::fuzz::Target* find_target(const std::string& name) {
  for (const auto& t : parity::fuzz::registered_targets())
    if (t.name == name) return &t;
  return nullptr;
}

class FuzzReplay : public testing::TestWithParam<std::string> {};

TEST_P(FuzzReplay, CorpusAndRegressionsRunCleanly) {
  const parity::fuzz::Target* t = find_target(GetParam());
  ASSERT_NE(t, nullptr);
  const fs::path root(PARITY_FUZZ_DIR);
  const auto seeds = files_in(root / "corpus" / t->name);
  EXPECT_FALSE(seeds.empty()) << "fuzz/corpus/" << t->name << " has no seed inputs";
  auto inputs = seeds;
  for (const auto& p : files_in(root / "regressions" / t->name)) inputs.push_back(p);
  for (const fs::path& p : inputs) {
    SCOPED_TRACE(p.string());
    const std::vector<uint8_t> bytes = read_bytes(p);
    // An exception other than parity::Error escaping the entry is a failure (gtest reports it).
    t->entry(bytes.data(), bytes.size());
  }
}

std::vector<std::string> target_names() {
  std::vector<std::string> names;
  for (const auto& t : parity::fuzz::registered_targets()) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  return names;
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay, testing::ValuesIn(target_names()),
                         [](const testing::TestParamInfo<std::string>& i) { return i.param; });

// A regressions folder without a registered target would silently never run.
TEST(FuzzReplayLayout, EveryRegressionFolderHasATarget) {
  const fs::path dir = fs::path(PARITY_FUZZ_DIR) / "regressions";
  if (!fs::is_directory(dir)) return;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_directory()) {
      EXPECT_NE(find_target(e.path().filename().string()), nullptr) << e.path();
    }
}

}  // namespace
