// The numerics flags end to end through the `parity` binary: score --exact equals generate --exact
// under a split schedule for several grids and both state dtypes, every logits file records its
// numerics identity, --mamba-exact-replay is --exact, compare notes a difference in identity, and
// bad values are refused naming the flag. Companion: a different grid changes the bits.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/numerics.h"
#include "common/error.h"
#include "kernels/exact_grid.h"
#include "model/checkpoint.h"
#include "model/tensor_parallel_model.h"
#include "io/safetensors.h"
#include "test_support.h"

namespace parity {
namespace {

namespace fs = std::filesystem;

std::string pattern_ids(int from, int to) {
  std::string s;
  for (int i = from; i < to; ++i) {
    if (!s.empty()) s += ',';
    s += std::to_string((i * 37 + 11) % 500);
  }
  return s;
}

struct LogitsFile {
  std::vector<float> logits;
  std::map<std::string, std::string> meta;
};
LogitsFile read_logits_file(const fs::path& p) {
  auto f = io::SafetensorsFile::open(p.string());
  const io::TensorView* t = f->find("logits");
  LogitsFile r;
  if (!t) return r;
  const float* d = static_cast<const float*>(t->data);
  r.logits.assign(d, d + t->shape[0] * t->shape[1]);
  r.meta = f->metadata();
  return r;
}

class CliNumerics : public ::testing::Test {
 protected:
  fs::path dir = test::scratch_dir("cli_numerics");
  void TearDown() override { fs::remove_all(dir); }
  std::string out(const std::string& name) const { return (dir / name).string(); }
};

constexpr int kPrompt = 37, kTotal = 70, kVocab = 512;  // builtin:tiny

TEST_F(CliNumerics, ScoreExactEqualsGenerateExactForEveryIdentity) {
  for (const std::string flags : {"", "--exact-grid 32", "--exact-grid 8 --exact-stagger none",
                                  "--mamba-ssm-cache-dtype bfloat16", "--exact-grid 4 --mamba-ssm-cache-dtype bfloat16"}) {
    SCOPED_TRACE(flags);
    auto r = test::run_cli("score builtin:tiny --exact " + flags + " --tokens " + pattern_ids(0, kTotal) + " --out " +
                           out("s.st"));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.err.find("numerics exact (grid"), std::string::npos) << r.err;
    r = test::run_cli("generate builtin:tiny --exact " + flags + " --max-num-batched-tokens 5 --prompt " +
                      pattern_ids(0, kPrompt) + " --forced " + pattern_ids(kPrompt, kTotal) + " --dump-logits " +
                      out("g.st"));
    ASSERT_EQ(r.status, 0) << r.err;
    const LogitsFile s = read_logits_file(out("s.st")), g = read_logits_file(out("g.st"));
    ASSERT_EQ(g.logits.size(), std::size_t(kTotal - kPrompt + 1) * kVocab);
    EXPECT_TRUE(test::same_bits(g.logits.data(), s.logits.data() + std::size_t(kPrompt - 1) * kVocab, g.logits.size()));
    for (const char* key : {"numerics", "exact_grid", "exact_stagger", "ssm_state_dtype"}) {
      ASSERT_TRUE(s.meta.count(key)) << key;
      EXPECT_EQ(s.meta.at(key), g.meta.at(key)) << key;
    }
    EXPECT_EQ(s.meta.at("numerics"), "exact");
    EXPECT_EQ(s.meta.at("ssm_state_dtype"), flags.find("bfloat16") != std::string::npos ? "bfloat16" : "float32");
    EXPECT_NE(r.out.find("\"exact_grid\""), std::string::npos) << r.out;
  }
}

// Companion: the grid is part of the identity: a generation on another grid differs from score.
TEST_F(CliNumerics, AnotherGridChangesTheBits) {
  ASSERT_EQ(
      test::run_cli("score builtin:tiny --exact --tokens " + pattern_ids(0, kTotal) + " --out " + out("s.st")).status,
      0);
  auto r = test::run_cli("generate builtin:tiny --exact --exact-grid 32 --prompt " + pattern_ids(0, kPrompt) +
                         " --forced " + pattern_ids(kPrompt, kTotal) + " --dump-logits " + out("g.st"));
  ASSERT_EQ(r.status, 0) << r.err;
  const LogitsFile s = read_logits_file(out("s.st")), g = read_logits_file(out("g.st"));
  ASSERT_EQ(g.logits.size(), std::size_t(kTotal - kPrompt + 1) * kVocab);
  EXPECT_FALSE(test::same_bits(g.logits.data(), s.logits.data() + std::size_t(kPrompt - 1) * kVocab, g.logits.size()));
  EXPECT_EQ(g.meta.at("exact_grid"), "32");
}

TEST_F(CliNumerics, MambaExactReplayIsExactAndPlainScoreSaysPlain) {
  ASSERT_EQ(test::run_cli("score builtin:tiny --exact --tokens " + pattern_ids(0, 40) + " --out " + out("a.st")).status,
            0);
  ASSERT_EQ(
      test::run_cli("score builtin:tiny --mamba-exact-replay --tokens " + pattern_ids(0, 40) + " --out " + out("b.st"))
          .status,
      0);
  auto r = test::run_cli("score builtin:tiny --tokens " + pattern_ids(0, 40) + " --out " + out("c.st"));
  ASSERT_EQ(r.status, 0);
  EXPECT_NE(r.err.find("numerics plain"), std::string::npos) << r.err;
  const LogitsFile a = read_logits_file(out("a.st")), b = read_logits_file(out("b.st")),
                   c = read_logits_file(out("c.st"));
  EXPECT_TRUE(test::same_bits(a.logits.data(), b.logits.data(), a.logits.size()));
  EXPECT_EQ(b.meta.at("numerics"), "exact");
  EXPECT_EQ(c.meta.at("numerics"), "plain");
  EXPECT_EQ(c.meta.count("exact_grid"), 0u);
}

TEST_F(CliNumerics, CompareNotesADifferentIdentity) {
  const std::string base = "capture builtin:tiny --prompt " + pattern_ids(0, 30) + " --forced " + pattern_ids(30, 40) +
                           " --modules lm_head --exact";
  ASSERT_EQ(test::run_cli(base + " --out " + out("a.st")).status, 0);
  ASSERT_EQ(test::run_cli(base + " --exact-grid 16 --out " + out("b.st")).status, 0);
  ASSERT_EQ(test::run_cli(base + " --out " + out("c.st")).status, 0);
  auto r = test::run_cli("compare " + out("a.st") + " " + out("b.st"));
  EXPECT_EQ(r.status, 1) << "another grid changes the bits";
  EXPECT_NE(r.out.find("different numerics: exact_grid " + std::to_string(kernels::kDefaultExactCell) + " vs 16"), std::string::npos) << r.out;
  r = test::run_cli("compare " + out("a.st") + " " + out("c.st"));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("different numerics"), std::string::npos) << r.out;
}

// validate against a reference that parity captured: the same identity reproduces it exactly (max
// |d| 0), another grid is named in a note (and differs, within tolerance).
TEST_F(CliNumerics, ValidateNotesADifferentIdentity) {
  ASSERT_EQ(test::run_cli("capture builtin:tiny --prompt " + pattern_ids(0, 16) + " --forced " + pattern_ids(16, 28) +
                          " --modules lm_head --exact --out " + out("ref.st"))
                .status,
            0);
  auto r = test::run_cli("validate builtin:tiny --exact --reference " + out("ref.st"));
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("different numerics"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("worst all: |Δ| 0.000e+00"), std::string::npos) << r.out;
  r = test::run_cli("validate builtin:tiny --exact --exact-grid 16 --reference " + out("ref.st"));
  EXPECT_NE(r.out.find("different numerics: exact_grid 16 vs " + std::to_string(kernels::kDefaultExactCell)),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("worst all: |Δ| 0.000e+00"), std::string::npos) << "another grid changes the bits";
}

TEST_F(CliNumerics, BadValuesAreRefusedNamingTheFlag) {
  for (const std::string& cmd : std::vector<std::string>{"score builtin:tiny --tokens 1,2 --out " + out("x.st") + " --exact --exact-grid 24",
                                "generate builtin:tiny --prompt 1,2 --max-tokens 2 --exact --exact-grid 0",
                                "generate builtin:tiny --prompt 1,2 --max-tokens 2 --exact --exact-stagger diagonal",
                                "generate builtin:tiny --prompt 1,2 --max-tokens 2 --mamba-ssm-cache-dtype float16",
                                "generate builtin:tiny --prompt 1,2 --max-tokens 2 --exact-grid 16",
                                "verify builtin:tiny --exact-grid 48",
                                "generate builtin:tiny --prompt 1,2 --max-tokens 2 --exact --scan-products fp16",
                                "generate builtin:tiny --prompt 1,2 --max-tokens 2 --scan-products bfloat16",
                                "score builtin:tiny --tokens 1,2 --out " + out("x.st") + " --exact --scan-products split",
                                "verify builtin:tiny --scan-products bfloat16 --scenario decode"}) {
    SCOPED_TRACE(cmd);
    auto r = test::run_cli(cmd);
    EXPECT_EQ(r.status, 1) << r.err;
    const bool names_flag = r.err.find("--exact-grid") != std::string::npos ||
                            r.err.find("--exact-stagger") != std::string::npos ||
                            r.err.find("--mamba-ssm-cache-dtype") != std::string::npos ||
                            r.err.find("--scan-products") != std::string::npos;
    EXPECT_TRUE(names_flag) << r.err;
  }
  EXPECT_FALSE(fs::exists(out("x.st"))) << "nothing is written on failure";
}

TEST(Numerics, DifferenceNamesTheKeysAndIgnoresFilesWithoutAnIdentity) {
  const cache::Numerics a = cache::resolve_numerics(true, std::nullopt, 16, cache::StaggerChoice::Auto, 256);
  const cache::Numerics b = cache::resolve_numerics(true, DType::BF16, 256, cache::StaggerChoice::Auto, 256);
  EXPECT_EQ(cache::numerics_difference(a.metadata(), a.metadata()), "");
  EXPECT_EQ(cache::numerics_difference(a.metadata(), b.metadata()),
            "ssm_state_dtype float32 vs bfloat16, exact_grid 16 vs 256, exact_stagger spread vs none");
  EXPECT_EQ(cache::numerics_difference(a.metadata(), {{"source", "huggingface"}}), "");
  EXPECT_THROW(cache::resolve_numerics(true, std::nullopt, 3, cache::StaggerChoice::Auto, 256), Error);
  EXPECT_THROW(cache::parse_stagger("both"), Error);
}

// The backend and the tensor-parallel degree are part of the identity: a CPU one-rank run writes neither key (its
// files read as before), another backend or degree writes and compares them, a missing key reading as cpu / 1.
TEST(Numerics, DeviceAndTensorParallelDegreeArePartOfTheIdentity) {
  const cache::Numerics cpu = cache::resolve_numerics(true, std::nullopt, 8, cache::StaggerChoice::Auto, 256);
  EXPECT_EQ(cpu.metadata().count("device"), 0u);
  EXPECT_EQ(cpu.metadata().count("tensor_parallel"), 0u);
  cache::Numerics gpu = cpu, tp2 = cpu;
  gpu.device = "cuda";
  tp2.tensor_parallel = 2;
  EXPECT_EQ(gpu.metadata().at("device"), "cuda");
  EXPECT_EQ(tp2.metadata().at("tensor_parallel"), "2");
  EXPECT_EQ(cache::numerics_difference(cpu.metadata(), gpu.metadata()), "device cpu vs cuda");
  EXPECT_EQ(cache::numerics_difference(tp2.metadata(), cpu.metadata()), "tensor_parallel 2 vs 1");
  EXPECT_EQ(cache::numerics_difference(tp2.metadata(), tp2.metadata()), "");
  EXPECT_NE(tp2.describe().find("tensor parallel 2"), std::string::npos) << tp2.describe();
  // Stamped from the model: a CPU built-in stays a one-rank CPU run.
  const auto m = model::load_model(model::open_checkpoint("builtin:tiny-g2"));
  const cache::Numerics stamped = model::stamp_backend(*m, cpu);
  EXPECT_EQ(stamped.device, "cpu");
  EXPECT_EQ(stamped.tensor_parallel, 1);
  const auto two = model::load_model(model::open_checkpoint("builtin:tiny-g2"), 2);
  EXPECT_EQ(model::stamp_backend(*two, cpu).tensor_parallel, 2);
}

// The scan's products are part of exact mode's identity: float32 (every backend's default) writes no key, so
// files read as before; bfloat16 and split write and compare it. Plain mode takes none, and the CPU backend,
// which forms fp32 products only, refuses the others at start-up (the CUDA model's refusals: CudaModel tests).
TEST(Numerics, ScanProductsArePartOfTheIdentity) {
  const cache::Numerics fp32 = cache::resolve_numerics(true, std::nullopt, 16, cache::StaggerChoice::Auto, 256);
  EXPECT_EQ(fp32.metadata().count("exact_scan_products"), 0u);
  EXPECT_EQ(fp32.describe().find("products"), std::string::npos) << fp32.describe();
  const cache::Numerics bf16 = cache::resolve_numerics(true, std::nullopt, 16, cache::StaggerChoice::Auto, 256,
                                                       kernels::kDefaultExactCell, kernels::ScanProducts::bfloat16);
  cache::Numerics split = bf16;
  split.grid.products = cache::parse_scan_products("split");
  EXPECT_EQ(bf16.metadata().at("exact_scan_products"), "bfloat16");
  EXPECT_NE(bf16.describe().find("scan products bfloat16"), std::string::npos) << bf16.describe();
  EXPECT_EQ(cache::numerics_difference(fp32.metadata(), bf16.metadata()), "exact_scan_products float32 vs bfloat16");
  EXPECT_EQ(cache::numerics_difference(split.metadata(), bf16.metadata()), "exact_scan_products split vs bfloat16");
  EXPECT_EQ(cache::numerics_difference(bf16.metadata(), bf16.metadata()), "");
  EXPECT_THROW(cache::resolve_numerics(false, std::nullopt, std::nullopt, cache::StaggerChoice::Auto, 256,
                                       kernels::kDefaultExactCell, kernels::ScanProducts::split),
               Error);
  EXPECT_THROW(cache::parse_scan_products("bf16"), Error);
  const auto m = model::load_model(model::open_checkpoint("builtin:tiny"));
  EXPECT_NO_THROW(model::stamp_backend(*m, fp32));  // the companion
  try {
    model::stamp_backend(*m, bf16);
    ADD_FAILURE() << "the CPU backend should refuse bfloat16 products";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("fp32 only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace parity
