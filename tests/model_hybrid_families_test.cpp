// The hybrid families beside Granite (NemotronH, Bamba, FalconH1) through the built-ins: probe points with
// Hugging Face's module names in forward order (what `parity compare` sorts files by), export as a checkpoint
// folder and load it back with the same bits, a checkpoint with a missing or mis-shaped tensor refused naming
// it, and the knobs each family adds changing the logits (so the paths are really taken).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "accuracy/module_order.h"
#include "common/error.h"
#include "io/safetensors.h"
#include "model/builtin.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "test_support.h"

using namespace parity;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> probe_names(const model::Model& m) {
  std::vector<std::string> names;
  for (const auto& p : m.probe_points()) names.push_back(p.name);
  return names;
}

// A built-in exported to a folder whose config.json is edited by `edit`.
std::unique_ptr<model::Model> exported(const std::string& name, const fs::path& dir,
                                       const std::function<void(nlohmann::json&)>& edit) {
  model::save_checkpoint(model::open_checkpoint("builtin:" + name), dir.string());
  nlohmann::json cfg;
  std::ifstream(dir / "config.json") >> cfg;
  edit(cfg);
  test::write_text(dir / "config.json", cfg.dump(2));
  return model::load_model(model::open_checkpoint(dir.string()));
}

}  // namespace

TEST(HybridFamilies, ProbePointsUseHuggingFaceNamesInForwardOrder) {
  const std::map<std::string, std::vector<std::string>> want = {
      {"tiny-nemotron-h",
       {"model.embeddings", "model.layers.0.mixer.in_proj", "model.layers.0.mixer.norm", "model.layers.1.mixer.gate",
        "model.layers.1.mixer.shared_experts", "model.layers.1.mixer", "model.layers.2.mixer.q_proj",
        "model.layers.4.mixer", "model.layers.5", "model.norm_f", "lm_head"}},
      {"tiny-bamba",
       {"model.embed_tokens", "model.layers.0.mamba.dt", "model.layers.0.feed_forward", "model.layers.2.self_attn.k_proj",
        "model.layers.2.self_attn", "model.final_layernorm", "lm_head"}},
      {"tiny-falcon-h1",
       {"model.embed_tokens", "model.layers.0.mamba.conv1d", "model.layers.0.mamba.norm", "model.layers.0.mamba",
        "model.layers.0.self_attn.v_proj", "model.layers.0.self_attn", "model.layers.2.feed_forward",
        "model.final_layernorm", "lm_head"}}};
  for (const auto& [name, expected] : want) {
    SCOPED_TRACE(name);
    auto m = model::load_model(model::open_checkpoint("builtin:" + name));
    const auto names = probe_names(*m);
    for (const auto& n : expected) EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
    std::vector<std::string> sorted = names;
    accuracy::sort_forward(sorted);
    EXPECT_EQ(sorted, names) << "compare's order is the forward order";
  }
}

TEST(HybridFamilies, ExportLoadsBackWithTheSameBits) {
  const auto toks = test::random_tokens(4, 40, 512);
  for (const char* name : {"tiny-nemotron-h", "tiny-bamba", "tiny-falcon-h1"}) {
    SCOPED_TRACE(name);
    const fs::path dir = test::scratch_dir(std::string("export_") + name);
    auto a = model::load_model(model::open_checkpoint(std::string("builtin:") + name));
    auto b = exported(name, dir, [](nlohmann::json&) {});
    EXPECT_EQ(b->architecture(), a->architecture());
    const auto x = model::score_all_rows(*a, toks), y = model::score_all_rows(*b, toks);
    EXPECT_TRUE(test::same_bits(x.data(), y.data(), x.size()));
    fs::remove_all(dir);
  }
}

// Each family knob changes the logits: NemotronH's routed_scaling_factor and correction bias path (the scale
// multiplies the routed experts only), Bamba's partial rotary factor, FalconH1's multipliers and its optional
// gated norm. A knob the model ignored would leave the bits unchanged.
TEST(HybridFamilies, FamilyKnobsChangeTheLogits) {
  const auto toks = test::random_tokens(8, 40, 512);
  struct Case {
    const char* model;
    const char* key;
    nlohmann::json value;
  };
  const Case cases[] = {{"tiny-nemotron-h", "routed_scaling_factor", 1.0},
                        {"tiny-nemotron-h", "norm_topk_prob", false},
                        {"tiny-bamba", "partial_rotary_factor", 1.0},
                        {"tiny-falcon-h1", "key_multiplier", 1.0},
                        {"tiny-falcon-h1", "ssm_multipliers", {1.0, 1.0, 1.0, 1.0, 1.0}},
                        {"tiny-falcon-h1", "mlp_multipliers", {1.0, 1.0}},
                        {"tiny-falcon-h1", "mamba_norm_before_gate", true},
                        {"tiny-falcon-h1", "mamba_rms_norm", false},
                        {"tiny-falcon-h1", "lm_head_multiplier", 1.0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(c.model) + " " + c.key);
    const fs::path dir = test::scratch_dir("knob");
    auto base = model::load_model(model::open_checkpoint(std::string("builtin:") + c.model));
    auto changed = exported(c.model, dir, [&](nlohmann::json& j) { j[c.key] = c.value; });
    const auto x = model::score_all_rows(*base, toks), y = model::score_all_rows(*changed, toks);
    EXPECT_FALSE(test::same_bits(x.data(), y.data(), x.size()));
    fs::remove_all(dir);
  }
}

TEST(HybridFamilies, MissingOrMisShapedTensorIsNamed) {
  const fs::path dir = test::scratch_dir("nemotron_bad");
  const model::Checkpoint ck = model::open_checkpoint("builtin:tiny-nemotron-h");
  model::save_checkpoint(ck, dir.string());
  auto src = io::SafetensorsFile::open((dir / "model.safetensors").string());
  auto rewrite = [&](const std::string& drop, const std::string& reshape) {
    std::vector<io::TensorToWrite> ts;
    static const float small[4] = {1, 2, 3, 4};
    for (const auto& t : src->tensors()) {
      if (t.name == drop) continue;
      if (t.name == reshape) ts.push_back({t.name, DType::F32, {2, 2}, small});
      else ts.push_back({t.name, t.dtype, t.shape, t.data});
    }
    const fs::path out = dir / "bad";
    fs::create_directories(out);
    fs::copy_file(dir / "config.json", out / "config.json", fs::copy_options::overwrite_existing);
    io::write_safetensors((out / "model.safetensors").string(), ts, {{"format", "pt"}});
    try {
      model::load_model(model::open_checkpoint(out.string()));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(loaded)");
  };
  std::string e = rewrite("model.layers.5.mixer.experts.3.down_proj.weight", "");
  EXPECT_NE(e.find("model.layers.5.mixer.experts.3.down_proj.weight"), std::string::npos) << e;
  e = rewrite("", "model.layers.1.mixer.gate.e_score_correction_bias");
  EXPECT_NE(e.find("model.layers.1.mixer.gate.e_score_correction_bias"), std::string::npos) << e;
  fs::remove_all(dir);
}
