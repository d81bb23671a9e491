// `parity capture --additional-config`: tensor replacement active while capturing.
#include <gtest/gtest.h>

#include <filesystem>

#include "accuracy/captures_file.h"
#include "test_support.h"

using namespace parity;

namespace {

TEST(AccuracyCaptureReplaceCli, ReplacedPointFlowsIntoTheCapture) {
  auto dir = test::scratch_dir("capture_replace");
  const std::string a = (dir / "a.safetensors").string(), b = (dir / "b.safetensors").string(),
                    c = (dir / "c.safetensors").string(), pert = (dir / "pert.safetensors").string();
  const std::string base = "capture builtin:tiny --prompt 1,2,3,4,5,6,7,8,9,10 --forced 11,12,13 --exact ";
  auto r = test::run_cli(base + "--modules backbone.layers.0.mixer lm_head --out " + a);
  ASSERT_EQ(r.status, 0) << r.err;
  auto cfg = [](const std::string& path) {
    return std::string("--additional-config '{\"tensor_replacement\": {\"tensors_path\": \"") + path +
           "\", \"modules\": [\"backbone.layers.0.mixer\"]}}' ";
  };
  // Same tensors injected: every captured logit keeps its bits.
  r = test::run_cli(base + "--modules lm_head " + cfg(a) + "--max-num-batched-tokens 3 --out " + b);
  ASSERT_EQ(r.status, 0) << r.err;
  // The summary comes after the run: every fed position's row (10 prompt + 3 forced) was replaced.
  EXPECT_NE(r.err.find("13 rows replaced"), std::string::npos) << r.err;
  auto A = accuracy::read_captures(a), B = accuracy::read_captures(b);
  const auto& la = A.prompts[0].flat.at("lm_head");
  const auto& lb = B.prompts[0].flat.at("lm_head");
  ASSERT_EQ(la.data.size(), lb.data.size());
  EXPECT_TRUE(test::same_bits(la.data.data(), lb.data.data(), la.data.size()));
  // Perturbed injection: the logits move.
  auto P = A;
  for (float& v : P.prompts[0].flat.at("backbone.layers.0.mixer").data) v += 0.25f;
  accuracy::write_captures(pert, P);
  r = test::run_cli(base + "--modules lm_head " + cfg(pert) + "--out " + c);
  ASSERT_EQ(r.status, 0) << r.err;
  auto Cc = accuracy::read_captures(c);  // keep the file's content alive while lc refers into it
  const auto& lc = Cc.prompts[0].flat.at("lm_head");
  EXPECT_FALSE(test::same_bits(la.data.data(), lc.data.data(), la.data.size()));
  // A malformed config is an error naming the problem, and nothing is written.
  r = test::run_cli(base + "--modules lm_head --additional-config '{\"tensor_replacement\": 3}' --out " +
                    (dir / "d.safetensors").string());
  EXPECT_NE(r.status, 0);
  EXPECT_LT(r.status, 128);
  EXPECT_FALSE(std::filesystem::exists(dir / "d.safetensors"));
  std::filesystem::remove_all(dir);
}

}  // namespace
