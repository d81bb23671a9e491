// parity capture MODEL --prompt T … --modules PATTERN … --out F: named intermediate tensors of
// one or more requests run through the engine, written as a captures file.
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accuracy/additional_config.h"
#include "accuracy/capture_run.h"
#include "accuracy/module_pattern.h"
#include "common/error.h"
#include "frontends/cli/commands.h"
#include "frontends/cli/engine_flags.h"
#include "frontends/cli/text_flags.h"
#include "io/token_file.h"
#include "model/model.h"

namespace parity::cli {


Runner add_capture(CLI::App& app) {
  struct Opts {
    EngineFlags engine;
    std::string model, out, layout = "flat";
    std::vector<std::string> prompts, forced, modules, prompt_texts, forced_texts;
    int max_tokens = 0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("capture", "Capture named intermediate tensors of requests run through the engine");
  sub->add_option("model", o->model, "checkpoint folder or builtin:NAME")->required();
  auto* p = sub->add_option("--prompt", o->prompts,
                            "prompt tokens: JSON file, 1,2,3 or a .txt file (repeat for several prompts)")
                ->allow_extra_args(false);  // one list per --prompt, so a positional after it stays positional
  auto* pt = sub->add_option("--prompt-text", o->prompt_texts, "prompt as text (repeat for several prompts)")
                 ->allow_extra_args(false);
  p->excludes(pt);
  auto* f = sub->add_option("--forced", o->forced,
                            "teacher-forced continuation: one shared, or one per prompt (repeat)")
                ->allow_extra_args(false);
  auto* ft = sub->add_option("--forced-text", o->forced_texts, "teacher-forced continuation as text (one shared, or one per prompt)")
                 ->allow_extra_args(false);
  f->excludes(ft);
  auto* m = sub->add_option("--max-tokens", o->max_tokens, "tokens to generate greedily (default: prompt only)")
                ->check(CLI::Range(1, 1 << 30));
  f->excludes(m);
  ft->excludes(m);
  sub->add_option("--modules", o->modules,
                  "probe points: exact names, layer ranges (backbone.layers.0-3.mixer) or re:REGEX (full match)")
      ->required();
  sub->add_option("--out", o->out, "output captures file (safetensors)")->required();
  sub->add_option("--layout", o->layout, "flat ([positions, E] per module) or step (seed 000's per-step tensors)")
      ->check(CLI::IsMember({"flat", "step"}));
  add_engine_flags(sub, o->engine, {.serving = false, .max_model_len = false, .state_memory = false});
  sub->get_option("--additional-config")
      ->description("JSON, e.g. {\"tensor_replacement\": {\"tensors_path\": …}}: replacement active while capturing");
  return [o]() {
    accuracy::CaptureSpec spec;
    TextTokens text(o->model);
    if (o->prompts.empty() && o->prompt_texts.empty()) throw Error("capture needs --prompt or --prompt-text");
    for (const std::string& p : o->prompts) spec.prompts.push_back(text.from_spec(p, "--prompt", true));
    for (const std::string& p : o->prompt_texts) spec.prompts.push_back(text.from_text(p, "--prompt-text", true));
    for (const std::string& t : o->forced) spec.forced.push_back(text.from_spec(t, "--forced", false));
    for (const std::string& t : o->forced_texts) spec.forced.push_back(text.from_text(t, "--forced-text", false));
    if (spec.forced.size() > 1 && spec.forced.size() != spec.prompts.size())
      throw Error("capture: " + std::to_string(spec.forced.size()) + " --forced for " + std::to_string(spec.prompts.size()) +
                  " --prompt (give one shared --forced or one per prompt)");
    spec.max_tokens = o->max_tokens > 0 ? o->max_tokens : 1;
    spec.layout = o->layout == "step" ? accuracy::CaptureLayout::Step : accuracy::CaptureLayout::Flat;
    const nlohmann::json additional = o->engine.check();
    spec.engine = o->engine.config();

    auto model = o->engine.load(o->model);
    std::vector<std::string> names;
    for (const auto& p : model->probe_points()) names.push_back(p.name);
    spec.modules = accuracy::expand_module_patterns(o->modules, names);
    auto replacement = accuracy::make_replacement_from_additional_config(additional, *model);
    spec.replacement = replacement.get();
    accuracy::Captures c = accuracy::capture_through_engine(*model, spec);
    // After the run: the summary counts the rows the run replaced.
    if (replacement) std::fprintf(stderr, "%s\n", replacement->describe().c_str());
    accuracy::write_captures(o->out, c);

    nlohmann::json out;
    out["out"] = o->out;
    out["layout"] = o->layout;
    out["mode"] = o->engine.numerics.exact ? "exact" : "plain";
    out["modules"] = spec.modules;
    out["prompts"] = nlohmann::json::array();
    for (const auto& p : c.prompts) {
      const int64_t positions = accuracy::flatten(p).begin()->second.rows;
      out["prompts"].push_back({{"prompt_tokens", p.prompt_token_ids.size()},
                                {"continuation", p.continuation_token_ids},
                                {"positions", positions}});
    }
    std::printf("%s\n", out.dump().c_str());
    return 0;
  };
}

}  // namespace parity::cli
