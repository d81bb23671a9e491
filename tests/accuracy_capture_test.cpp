// Captures files (both layouts, seed 000's flattening, every malformed-file branch), module
// patterns, and capture through the engine: exact mode gives the same bits under any schedule
// and equals `score`; plain mode does not (the companion that shows the check can fail).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>

#include "accuracy/capture_hooks.h"
#include "accuracy/capture_run.h"
#include "accuracy/captures_file.h"
#include "accuracy/module_order.h"
#include "accuracy/module_pattern.h"
#include "common/error.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "error_test_support.h"
#include "test_support.h"

using namespace parity;
using namespace parity::accuracy;
namespace fs = std::filesystem;

namespace {

using test::expect_error;

Matrix iota(int64_t rows, int64_t cols, float base) {
  Matrix m{rows, cols, {}};
  for (int64_t i = 0; i < rows * cols; ++i) m.data.push_back(base + 0.25f * static_cast<float>(i));
  return m;
}

bool same_matrix(const Matrix& a, const Matrix& b) {
  return a.rows == b.rows && a.cols == b.cols && test::same_bits(a.data.data(), b.data.data(), a.data.size());
}

Captures layout_sample(CaptureLayout layout) {
  Captures c;
  c.layout = layout;
  c.metadata["model"] = "builtin:tiny";
  for (int i = 0; i < 2; ++i) {
    PromptCapture p;
    p.prompt_token_ids = i == 0 ? std::vector<int32_t>{5, 6, 7} : std::vector<int32_t>{9, 8};
    p.continuation_token_ids = {11, 12};
    const int64_t P = static_cast<int64_t>(p.prompt_token_ids.size());
    for (const char* m : {"backbone.layers.0.mixer", "lm_head"}) {
      const int64_t E = std::string(m) == "lm_head" ? 6 : 4;
      if (layout == CaptureLayout::Flat) {
        p.flat[m] = iota(P + 2, E, static_cast<float>(i));
      } else {
        p.steps[m] = {iota(P, E, 1.0f + i), iota(1, E, 2.0f), iota(P + 2, E, 3.0f)};
      }
    }
    c.prompts.push_back(p);
  }
  return c;
}

class AccuracyCapturesFile : public test::ScratchDirTest {};

TEST_F(AccuracyCapturesFile, RoundTripBothLayouts) {
  for (CaptureLayout layout : {CaptureLayout::Flat, CaptureLayout::Step}) {
    const Captures c = layout_sample(layout);
    write_captures(path("c.safetensors"), c);
    const Captures back = read_captures(path("c.safetensors"));
    EXPECT_EQ(back.layout, layout);
    EXPECT_EQ(back.metadata, c.metadata);
    ASSERT_EQ(back.prompts.size(), 2u);
    for (std::size_t i = 0; i < 2; ++i) {
      const PromptCapture& a = c.prompts[i];
      const PromptCapture& b = back.prompts[i];
      EXPECT_EQ(a.prompt_token_ids, b.prompt_token_ids);
      EXPECT_EQ(a.continuation_token_ids, b.continuation_token_ids);
      ASSERT_EQ(a.flat.size(), b.flat.size());
      for (const auto& [m, x] : a.flat) EXPECT_TRUE(same_matrix(x, b.flat.at(m))) << m;
      ASSERT_EQ(a.steps.size(), b.steps.size());
      for (const auto& [m, s] : a.steps) {
        ASSERT_EQ(s.size(), b.steps.at(m).size());
        for (std::size_t k = 0; k < s.size(); ++k)
          EXPECT_TRUE(same_matrix(s[k], b.steps.at(m)[k])) << m << " step " << k;
      }
    }
    const auto f = io::SafetensorsFile::open(path("c.safetensors"));
    EXPECT_EQ(f->metadata().at("modules"), "backbone.layers.0.mixer,lm_head");
    EXPECT_EQ(f->metadata().at("num_prompts"), "2");
    EXPECT_EQ(f->find("p0/prompt_token_ids")->dtype, DType::I64);
    if (layout == CaptureLayout::Step) {
      EXPECT_EQ(f->find("p1/lm_head/step2")->shape, (std::vector<int64_t>{1, 4, 6}));
    } else {
      EXPECT_EQ(f->find("p1/lm_head")->shape, (std::vector<int64_t>{4, 6}));
    }
  }
}

// Seed 000: all rows of step 0, then the last row of each later step, whether a step holds one
// row or the whole sequence so far.
TEST_F(AccuracyCapturesFile, FlattenTakesStepZeroAndLastRowOfEachLaterStep) {
  PromptCapture p;
  p.prompt_token_ids = {1, 2, 3};
  p.steps["m"] = {iota(3, 2, 0.0f), iota(4, 2, 100.0f), iota(1, 2, 200.0f), iota(6, 2, 300.0f)};
  const Matrix f = flatten(p).at("m");
  ASSERT_EQ(f.rows, 6);
  ASSERT_EQ(f.cols, 2);
  const Matrix s0 = p.steps["m"][0];
  EXPECT_TRUE(test::same_bits(f.data.data(), s0.data.data(), 6));
  EXPECT_TRUE(test::same_bits(f.row(3), p.steps["m"][1].row(3), 2));
  EXPECT_TRUE(test::same_bits(f.row(4), p.steps["m"][2].row(0), 2));
  EXPECT_TRUE(test::same_bits(f.row(5), p.steps["m"][3].row(5), 2));

  PromptCapture flat;
  flat.prompt_token_ids = {1};
  flat.flat["m"] = iota(3, 2, 1.0f);
  EXPECT_TRUE(same_matrix(flatten(flat).at("m"), flat.flat.at("m")));
}

TEST_F(AccuracyCapturesFile, ReadsHalfPrecisionTensors) {
  const int64_t ids[] = {4, 5};
  const uint16_t bf[] = {0x3f80, 0xc000, 0x3f00, 0x0000};  // 1, -2, 0.5, 0
  const uint16_t hf[] = {0x3c00, 0xc000, 0x3800, 0x0000};  // the same values in IEEE half
  io::write_safetensors(path("h.safetensors"),
                        {{"p0/prompt_token_ids", DType::I64, {2}, ids}, {"p0/a", DType::BF16, {2, 2}, bf},
                         {"p0/b", DType::F16, {2, 2}, hf}},
                        {{"layout", "flat"}, {"modules", "a,b"}, {"num_prompts", "1"}});
  const Captures c = read_captures(path("h.safetensors"));
  EXPECT_EQ(c.prompts[0].flat.at("a").data, (std::vector<float>{1, -2, 0.5f, 0}));
  EXPECT_EQ(c.prompts[0].flat.at("b").data, (std::vector<float>{1, -2, 0.5f, 0}));
}

// One file per branch of the reader's checks; each message names the file and the key.
TEST_F(AccuracyCapturesFile, MalformedFilesErrorLoudly) {
  struct Spec {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    std::vector<int64_t> ids = {};  // I64 / I32 content; floats are filled with 0.5
  };
  using Meta = std::map<std::string, std::string>;
  const Meta flat{{"layout", "flat"}, {"modules", "m"}, {"num_prompts", "1"}};
  const Meta step{{"layout", "step"}, {"modules", "m"}, {"num_prompts", "1"}};
  const Spec ids{"p0/prompt_token_ids", DType::I64, {3}, {1, 2, 3}};
  const std::string file = path("bad.safetensors");
  auto write = [&](const std::vector<Spec>& specs, const Meta& meta) {
    std::vector<std::vector<unsigned char>> bufs;
    std::vector<io::TensorToWrite> t;
    for (const Spec& s : specs) {
      int64_t n = 1;
      for (auto d : s.shape) n *= d;
      std::vector<unsigned char> b(static_cast<std::size_t>(n) * dtype_size(s.dtype));
      for (int64_t i = 0; i < n; ++i) {
        if (s.dtype == DType::I64) std::memcpy(b.data() + 8 * i, &s.ids[static_cast<std::size_t>(i)], 8);
        if (s.dtype == DType::I32) {
          int32_t v = static_cast<int32_t>(s.ids[static_cast<std::size_t>(i)]);
          std::memcpy(b.data() + 4 * i, &v, 4);
        }
        if (s.dtype == DType::F32) {
          float v = 0.5f;
          std::memcpy(b.data() + 4 * i, &v, 4);
        }
      }
      bufs.push_back(std::move(b));
    }
    for (std::size_t i = 0; i < specs.size(); ++i) t.push_back({specs[i].name, specs[i].dtype, specs[i].shape, bufs[i].data()});
    io::write_safetensors(file, t, meta);
  };
  auto bad = [&](const std::vector<Spec>& specs, const Meta& meta, const std::string& needle) {
    SCOPED_TRACE(needle);
    write(specs, meta);
    expect_error([&] { read_captures(file); }, {needle});
  };
  // The good base case reads.
  write({ids, {"p0/m", DType::F32, {3, 4}}}, flat);
  EXPECT_NO_THROW(read_captures(file));

  bad({ids, {"p0/m", DType::F32, {3, 4}}}, {}, "not a captures file");
  bad({ids, {"p0/m", DType::F32, {3, 4}}}, {{"layout", "rows"}, {"modules", "m"}, {"num_prompts", "1"}},
      "expected 'step' or 'flat'");
  bad({ids, {"p0/m", DType::F32, {3, 4}}}, {{"layout", "flat"}, {"modules", "m"}, {"num_prompts", "x"}},
      "num_prompts is 'x'");
  bad({ids, {"p0/m", DType::F32, {3, 4}}}, {{"layout", "flat"}, {"modules", "m,"}, {"num_prompts", "1"}},
      "empty name");
  bad({ids, {"p0/m", DType::F32, {3, 4}}, {"weights", DType::F32, {2}}}, flat, "weights: unexpected tensor name");
  bad({ids, {"p0/m", DType::F32, {3, 4}}, {"p1/m", DType::F32, {3, 4}}}, flat, "but num_prompts is 1");
  bad({{"p0/prompt_token_ids", DType::F32, {3}}, {"p0/m", DType::F32, {3, 4}}}, flat, "1-D I64");
  bad({{"p0/prompt_token_ids", DType::I64, {2}, {1, -4}}, {"p0/m", DType::F32, {3, 4}}}, flat, "token id -4");
  bad({ids, {"p0/m", DType::F32, {3, 4}}, {"p0/z", DType::F32, {3, 4}}}, flat, "'z' is not listed");
  bad({ids, {"p0/m", DType::I32, {3, 4}, std::vector<int64_t>(12, 1)}}, flat, "dtype I32");
  bad({ids, {"p0/m", DType::F32, {1, 3, 4}}}, step, "p{i}/{module}/step{k}");
  bad({ids, {"p0/m/stepx", DType::F32, {1, 3, 4}}}, step, "is not step{k}");
  bad({ids, {"p0/m/step0", DType::F32, {3, 4}}}, step, "must be [1, rows, E]");
  bad({ids, {"p0/m/step0", DType::F32, {2, 3, 4}}}, step, "must be [1, rows, E]");
  bad({ids, {"p0/m/step0", DType::F32, {1, 3, 4}}}, flat, "names tensors p{i}/{module}");
  bad({ids, {"p0/m", DType::F32, {1, 3, 4}}}, flat, "must be [positions, E]");
  bad({{"p0/m", DType::F32, {3, 4}}}, flat, "p0/prompt_token_ids is missing");
  bad({ids}, flat, "p0/m is missing");
  bad({ids, {"p0/m/step0", DType::F32, {1, 3, 4}}, {"p0/m/step2", DType::F32, {1, 1, 4}}}, step, "without gaps");
  bad({ids, {"p0/m", DType::F32, {2, 4}}}, flat, "fewer than the prompt's 3");
  bad({ids, {"p0/continuation_token_ids", DType::I64, {1}, {9}}, {"p0/m", DType::F32, {5, 4}}}, flat,
      "more than prompt + continuation");
  bad({ids, {"p0/m/step0", DType::F32, {1, 2, 4}}}, step, "step 0 has 2 rows, the prompt has 3");
  bad({ids, {"p0/m/step0", DType::F32, {1, 3, 4}}, {"p0/m/step1", DType::F32, {1, 2, 4}}}, step,
      "a later step holds 1 row or the whole sequence so far (4)");
  bad({ids, {"p0/continuation_token_ids", DType::I64, {1}, {9}}, {"p0/m/step0", DType::F32, {1, 3, 4}},
       {"p0/m/step1", DType::F32, {1, 1, 4}}, {"p0/m/step2", DType::F32, {1, 1, 4}}},
      step, "more than the 1 continuation tokens");
  bad({ids, {"p0/m/step0", DType::F32, {1, 3, 4}}, {"p0/m/step1", DType::F32, {1, 1, 5}}}, step, "feature size 5");
  bad({ids, {"p0/m", DType::F32, {3, 4}}, {"p1/prompt_token_ids", DType::I64, {1}, {1}}, {"p1/m", DType::F32, {1, 5}}},
      {{"layout", "flat"}, {"modules", "m"}, {"num_prompts", "2"}}, "feature size 5");
  bad({ids, {"p0/m", DType::F32, {3, 4}}, {"p0/m2", DType::F32, {3, 4}}, {"p1/prompt_token_ids", DType::I64, {1}, {1}},
       {"p1/m", DType::F32, {1, 4}}},
      {{"layout", "flat"}, {"modules", "m,m2"}, {"num_prompts", "2"}}, "p1/m2 is missing");

  test::write_text(file, "not safetensors");
  expect_error([&] { read_captures(file); }, {file});
  expect_error([&] { read_captures(path("absent.safetensors")); }, {"absent.safetensors"});

  // The writer refuses what the reader would refuse, before touching the disk.
  Captures empty;
  expect_error([&] { write_captures(path("w.safetensors"), empty); }, {"holds no prompts"});
  Captures mixed = layout_sample(CaptureLayout::Flat);
  mixed.prompts[1].flat.erase("lm_head");
  expect_error([&] { write_captures(path("w.safetensors"), mixed); }, {"p1/lm_head is missing"});
  EXPECT_FALSE(fs::exists(path("w.safetensors")));
}

const std::vector<std::string> kNames = {
    "backbone.embeddings",
    "backbone.layers.0.mixer.in_proj", "backbone.layers.0.mixer.dt", "backbone.layers.0.mixer", "backbone.layers.0",
    "backbone.layers.1.mixer.in_proj", "backbone.layers.1.mixer.dt", "backbone.layers.1.mixer", "backbone.layers.1",
    "backbone.layers.2.mixer.in_proj", "backbone.layers.2.mixer.dt", "backbone.layers.2.mixer", "backbone.layers.2",
    "backbone.norm_f", "lm_head"};

TEST(AccuracyModulePattern, ExactRangeAndRegex) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_module_patterns({"lm_head"}, kNames), V{"lm_head"});
  EXPECT_EQ(expand_module_patterns({"backbone.layers.1"}, kNames), V{"backbone.layers.1"});
  EXPECT_EQ(expand_module_patterns({"backbone.layers.0-1.mixer"}, kNames),
            (V{"backbone.layers.0.mixer", "backbone.layers.1.mixer"}));
  EXPECT_EQ(expand_module_patterns({R"(re:backbone\.layers\.\d+\.mixer\.dt)"}, kNames),
            (V{"backbone.layers.0.mixer.dt", "backbone.layers.1.mixer.dt", "backbone.layers.2.mixer.dt"}));
  // Full match: "mixer" alone does not select "mixer.dt".
  EXPECT_EQ(expand_module_patterns({R"(re:.*\.2\.mixer)"}, kNames), V{"backbone.layers.2.mixer"});
  // Several patterns: forward order, each name once.
  EXPECT_EQ(expand_module_patterns({"lm_head", "backbone.layers.1-2", "re:backbone\\.layers\\.1", "backbone.embeddings"}, kNames),
            (V{"backbone.embeddings", "backbone.layers.1", "backbone.layers.2", "lm_head"}));
}

TEST(AccuracyModulePattern, NothingMatchedIsAnErrorNamingThePattern) {
  expect_error([] { expand_module_patterns({"backbone.layers.0.mixr"}, kNames); },
               {"'backbone.layers.0.mixr' matches no probe point; valid names: backbone.embeddings, "});
  expect_error([] { expand_module_patterns({"lm_head", "re:nothing.*"}, kNames); }, {"'re:nothing.*' matches no"});
  expect_error([] { expand_module_patterns({"backbone.layers.1-3.mixer"}, kNames); },
               {"names backbone.layers.3.mixer, which is not a probe point"});
  expect_error([] { expand_module_patterns({"backbone.layers.2-1"}, kNames); }, {"is empty"});
  expect_error([] { expand_module_patterns({"re:(unclosed"}, kNames); }, {"not a valid regular expression"});
  expect_error([] { expand_module_patterns({}, kNames); }, {"no module pattern"});
}

TEST(AccuracyModuleOrder, SortsByLayerThenProbeOrder) {
  std::vector<std::string> v = {"lm_head", "backbone.layers.10.mixer", "backbone.layers.2", "backbone.norm_f",
                                "backbone.layers.2.mixer.norm", "backbone.layers.2.mixer.in_proj",
                                "backbone.embeddings", "backbone.layers.2.mixer.conv1d", "backbone.layers.2.mixer.dt",
                                "backbone.layers.2.mixer"};
  sort_forward(v);
  EXPECT_EQ(v, (std::vector<std::string>{"backbone.embeddings", "backbone.layers.2.mixer.in_proj",
                                          "backbone.layers.2.mixer.conv1d", "backbone.layers.2.mixer.dt",
                                          "backbone.layers.2.mixer.norm", "backbone.layers.2.mixer",
                                          "backbone.layers.2", "backbone.layers.10.mixer", "backbone.norm_f",
                                          "lm_head"}));
  EXPECT_EQ(layer_index("model.layers.7.mlp.router"), 7);
  EXPECT_EQ(layer_index("lm_head"), -1);
}

// Rows revisited under recompute: the latest visit is kept.
TEST(AccuracyCaptureHooks, KeepsTheLatestVisitAndBuildsBothLayouts) {
  CaptureHooks h({"m"});
  EXPECT_TRUE(h.wants("m"));
  EXPECT_FALSE(h.wants("other"));
  model::ForwardBatch b;
  b.request_ids = {7, 9};
  model::ProbeRows rows;
  rows.batch = &b;
  rows.seq = {0, 0, 0, 1};
  rows.position = {0, 1, 2, 0};
  std::vector<float> x = {0, 0, 1, 1, 2, 2, 50, 50};
  h.visit("m", x.data(), 4, 2, rows);
  rows.seq = {0, 0};
  rows.position = {2, 3};
  std::vector<float> y = {20, 20, 3, 3};
  h.visit("m", y.data(), 2, 2, rows);

  const PromptCapture f = h.build(7, {1, 2}, {5, 6}, 4, CaptureLayout::Flat);
  EXPECT_EQ(f.flat.at("m").data, (std::vector<float>{0, 0, 1, 1, 20, 20, 3, 3}));
  const PromptCapture s = h.build(7, {1, 2}, {5, 6}, 4, CaptureLayout::Step);
  ASSERT_EQ(s.steps.at("m").size(), 3u);
  EXPECT_EQ(s.steps.at("m")[0].rows, 2);
  EXPECT_EQ(s.steps.at("m")[2].data, (std::vector<float>{3, 3}));
  EXPECT_TRUE(same_matrix(flatten(s).at("m"), f.flat.at("m")));
  expect_error([&] { h.build(9, {1}, {}, 2, CaptureLayout::Flat); }, {"no row for position 1 of request 9"});
  expect_error([&] { h.build(8, {1}, {}, 1, CaptureLayout::Flat); }, {"never visited for request 8"});
}

// ------------------------------------------------------------------------------------------
// Through the engine

std::vector<std::string> all_points(const model::Model& m) {
  std::vector<std::string> v;
  for (const auto& p : m.probe_points()) v.push_back(p.name);
  return v;
}

CaptureSpec forced_spec(model::ScanMode mode, int budget, int64_t preempt_at) {
  CaptureSpec s;
  // Lengths cross the 32-token chunk grid inside the prompt and during the forced steps.
  for (int len : {45, 70, 3}) {
    std::vector<int32_t> p;
    for (int i = 0; i < len; ++i) p.push_back((i * 37 + len) % 512);
    s.prompts.push_back(p);
  }
  s.forced = {{17, 300, 4, 99, 250, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 19, 20, 21}};
  s.modules = all_points(test::tiny_model());
  s.engine.mode = mode;
  s.engine.sched.max_num_batched_tokens = budget;
  s.engine.preempt_at_step = preempt_at;
  return s;
}

// Modules (prompt, name) whose bits differ between two flat captures.
std::vector<std::string> differing(const Captures& a, const Captures& b) {
  std::vector<std::string> out;
  EXPECT_EQ(a.prompts.size(), b.prompts.size());
  for (std::size_t i = 0; i < a.prompts.size(); ++i) {
    EXPECT_EQ(a.prompts[i].continuation_token_ids, b.prompts[i].continuation_token_ids);
    const auto fa = flatten(a.prompts[i]), fb = flatten(b.prompts[i]);
    EXPECT_EQ(fa.size(), fb.size());
    for (const auto& [m, x] : fa)
      if (!same_matrix(x, fb.at(m))) out.push_back(std::to_string(i) + ":" + m);
  }
  return out;
}

TEST(AccuracyCaptureEngine, ExactModeIsBitIdenticalUnderEverySchedule) {
  const Captures ref = capture_through_engine(test::tiny_model(), forced_spec(model::ScanMode::Exact, 1000, -1));
  ASSERT_EQ(ref.prompts.size(), 3u);
  EXPECT_EQ(ref.prompts[0].flat.at("lm_head").rows, 45 + 25);
  EXPECT_EQ(ref.prompts[1].flat.at("backbone.layers.1.mixer.in_proj").rows, 70 + 25);
  EXPECT_EQ(ref.prompts[1].flat.at("backbone.layers.1.mixer.in_proj").cols,
            test::tiny_model().cache_spec().mamba.in_proj_dim());
  for (auto [budget, preempt] : {std::pair{7, -1}, std::pair{1000, 3}, std::pair{7, 5}, std::pair{3, 30}}) {
    SCOPED_TRACE("budget " + std::to_string(budget) + ", preempt at " + std::to_string(preempt));
    const Captures c = capture_through_engine(test::tiny_model(), forced_spec(model::ScanMode::Exact, budget, preempt));
    EXPECT_EQ(differing(ref, c), std::vector<std::string>{});
  }
}

TEST(AccuracyCaptureEngine, GreedyCaptureIsScheduleIndependentInExactMode) {
  auto spec = [](int budget, int64_t preempt) {
    CaptureSpec s = forced_spec(model::ScanMode::Exact, budget, preempt);
    s.forced.clear();
    s.max_tokens = 12;
    s.layout = CaptureLayout::Step;
    return s;
  };
  const Captures a = capture_through_engine(test::tiny_model(), spec(1000, -1));
  const Captures b = capture_through_engine(test::tiny_model(), spec(7, 4));
  EXPECT_EQ(differing(a, b), std::vector<std::string>{});
  // The twelfth token is sampled and never fed: prompt + 11 positions, one step each after step 0.
  EXPECT_EQ(a.prompts[0].continuation_token_ids.size(), 12u);
  EXPECT_EQ(a.prompts[0].steps.at("lm_head").size(), 12u);
  EXPECT_EQ(a.prompts[0].steps.at("lm_head")[0].rows, 45);
  EXPECT_EQ(a.prompts[0].steps.at("lm_head")[1].rows, 1);
}

TEST(AccuracyCaptureEngine, LmHeadCaptureEqualsScoreLogits) {
  const auto& m = test::tiny_model();
  const CaptureSpec spec = forced_spec(model::ScanMode::Exact, 7, 4);
  const Captures c = capture_through_engine(m, spec);
  for (std::size_t i = 0; i < spec.prompts.size(); ++i) {
    std::vector<int32_t> all = spec.prompts[i];
    all.insert(all.end(), spec.forced[0].begin(), spec.forced[0].end());
    const std::vector<float> logits = model::score_all_rows(m, all);
    const Matrix& head = c.prompts[i].flat.at("lm_head");
    ASSERT_EQ(head.rows, static_cast<int64_t>(all.size()));
    EXPECT_TRUE(test::same_bits(head.data.data(), logits.data(), logits.size())) << "prompt " << i;
  }
}

// The companion: the same comparison in plain mode finds differences, so it can fail.
TEST(AccuracyCaptureEngine, PlainModeDiffersBetweenSchedules) {
  const Captures a = capture_through_engine(test::tiny_model(), forced_spec(model::ScanMode::Plain, 1000, -1));
  const Captures b = capture_through_engine(test::tiny_model(), forced_spec(model::ScanMode::Plain, 7, 5));
  const auto diff = differing(a, b);
  EXPECT_FALSE(diff.empty());
  // Everything before the first recurrent core is schedule-independent even in plain mode.
  for (const std::string& d : diff) EXPECT_EQ(d.find("embeddings"), std::string::npos) << d;
}

TEST(AccuracyCaptureEngine, RejectsAMismatchedForcedCount) {
  CaptureSpec s = forced_spec(model::ScanMode::Exact, 1000, -1);
  s.forced.push_back({1});
  expect_error([&] { capture_through_engine(test::tiny_model(), s); }, {"2 forced continuations for 3 prompts"});
}

// ------------------------------------------------------------------------------------------
// The commands

TEST(AccuracyCaptureCli, ProbesListsEveryPointWithShape) {
  auto r = test::run_cli("probes builtin:tiny");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("backbone.layers.1.mixer.dt"), std::string::npos);
  EXPECT_NE(r.out.find("[tokens, 4]"), std::string::npos);
  EXPECT_NE(r.out.find("lm_head"), std::string::npos);
  EXPECT_NE(r.out.find("before SiLU"), std::string::npos);
}

TEST(AccuracyCaptureCli, WritesAFileTheReaderAccepts) {
  auto dir = test::scratch_dir("capture_cli");
  const std::string out = (dir / "c.safetensors").string();
  auto r = test::run_cli("capture builtin:tiny --prompt 1,2,3,4,5 --prompt 7,8,9 --forced 10,11 --modules "
                         "backbone.layers.0-1.mixer 're:backbone\\.layers\\.1\\.mixer\\.dt' lm_head --exact "
                         "--max-num-batched-tokens 2 --out " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  const Captures c = read_captures(out);
  EXPECT_EQ(c.layout, CaptureLayout::Flat);
  EXPECT_EQ(captured_modules(c), (std::vector<std::string>{"backbone.layers.0.mixer", "backbone.layers.1.mixer.dt",
                                                           "backbone.layers.1.mixer", "lm_head"}));
  ASSERT_EQ(c.prompts.size(), 2u);
  EXPECT_EQ(c.prompts[1].prompt_token_ids, (std::vector<int32_t>{7, 8, 9}));
  EXPECT_EQ(c.prompts[1].continuation_token_ids, (std::vector<int32_t>{10, 11}));
  EXPECT_EQ(c.prompts[0].flat.at("lm_head").rows, 7);
  EXPECT_EQ(c.prompts[0].flat.at("lm_head").cols, 512);
  EXPECT_EQ(c.prompts[1].flat.at("backbone.layers.1.mixer.dt").rows, 5);
  EXPECT_EQ(c.prompts[1].flat.at("backbone.layers.1.mixer.dt").cols, 4);
  EXPECT_EQ(c.metadata.at("mode"), "exact");

  r = test::run_cli("capture builtin:tiny --prompt 1,2,3 --max-tokens 3 --layout step --modules backbone.layers.0 "
                    "--out " + out);
  ASSERT_EQ(r.status, 0) << r.err;
  const Captures s = read_captures(out);
  EXPECT_EQ(s.layout, CaptureLayout::Step);
  EXPECT_EQ(s.prompts[0].steps.at("backbone.layers.0").size(), 3u);
  EXPECT_EQ(s.prompts[0].continuation_token_ids.size(), 3u);
  fs::remove_all(dir);
}

TEST(AccuracyCaptureCli, UserErrorsAreOneLineAndWriteNothing) {
  auto dir = test::scratch_dir("capture_cli_err");
  const std::string out = (dir / "c.safetensors").string();
  auto r = test::run_cli("capture builtin:tiny --prompt 1,2 --modules backbone.layers.0.mixr --out " + out);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("'backbone.layers.0.mixr' matches no probe point"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("backbone.embeddings"), std::string::npos) << r.err;
  r = test::run_cli("capture builtin:tiny --prompt 1,2 --prompt 3 --forced 4 --forced 5 --forced 6 --modules lm_head --out " +
                    out);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("3 --forced for 2 --prompt"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
  fs::remove_all(dir);
}

}  // namespace
