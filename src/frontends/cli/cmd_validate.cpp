// parity validate MODEL --reference REF: teacher-forced logit validation with divergence retry
// against reference logits (module lm_head of a captures file). Exit status 1 on failure.
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accuracy/additional_config.h"
#include "accuracy/logit_validation.h"
#include "accuracy/validation_report.h"
#include "common/error.h"
#include "frontends/cli/commands.h"
#include "frontends/cli/engine_flags.h"
#include "io/json_file.h"
#include "model/model.h"

namespace parity::cli {

Runner add_validate(CLI::App& app) {
  struct Opts {
    EngineFlags engine;
    std::string model, reference, tol_map, json_out;
    int prompt_index = -1, max_tokens = 0;
    double divergence_tol = 0.001;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("validate", "Teacher-forced logit validation against reference logits");
  sub->add_option("model", o->model, "checkpoint folder or builtin:NAME")->required();
  sub->add_option("--reference", o->reference, "captures file with lm_head rows and prompt_token_ids per prompt")
      ->required();
  sub->add_option("--prompt-index", o->prompt_index, "validate only this prompt (default: all)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--max-tokens", o->max_tokens, "check at most N generated tokens per prompt")
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("--tol-map", o->tol_map, "JSON (inline or a file): {\"5\": [atol, rtol], …, \"all\": [atol, rtol]}");
  sub->add_option("--divergence-tol", o->divergence_tol, "a divergence passes when ref[expected] - ref[ours] <= X")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--json", o->json_out, "write the full report as JSON");
  add_engine_flags(sub, o->engine,
                   {.serving = false, .max_num_seqs = false, .max_model_len = false, .state_memory = false,
                    .preempt = false});
  return [o]() {
    accuracy::ValidationOptions opt;
    if (!o->tol_map.empty())
      opt.tol_map = accuracy::parse_tol_map(o->tol_map.front() == '{' ? io::parse_hf_json(o->tol_map, "--tol-map")
                                                                       : io::read_json_file(o->tol_map));
    const nlohmann::json additional = o->engine.check();  // a bad config fails before the model loads
    opt.divergence_tol = o->divergence_tol;
    opt.max_tokens = o->max_tokens;
    if (o->prompt_index >= 0) opt.prompt_indices = {o->prompt_index};
    opt.engine = o->engine.config();
    const accuracy::Captures ref_file = accuracy::read_captures(o->reference);
    const auto refs = accuracy::logit_reference_from_captures(ref_file);

    auto model = o->engine.load(o->model);
    auto replacement = accuracy::make_replacement_from_additional_config(additional, *model);
    opt.replacement = replacement.get();
    const accuracy::ValidationReport rep = accuracy::validate_logits(*model, refs, opt);
    // A reference made by parity with another numerics identity cannot match bit for bit.
    const std::string numerics =
        cache::numerics_difference(o->engine.numerics.resolve(*model).metadata(), ref_file.metadata);
    if (!numerics.empty())
      std::printf("note: this run and the reference were made with different numerics: %s\n", numerics.c_str());
    if (!o->json_out.empty()) {
      nlohmann::json j = accuracy::validation_to_json(rep);
      j["model"] = model->origin();
      j["reference"] = o->reference;
      j["mode"] = o->engine.numerics.exact ? "exact" : "plain";
      j["numerics"] = o->engine.numerics.resolve(*model).metadata();
      if (!numerics.empty()) j["numerics_difference"] = numerics;
      std::ofstream f(o->json_out);
      f << j.dump(2) << "\n";
      if (!f) throw Error(o->json_out + ": cannot write the report");
    }
    std::fputs(accuracy::validation_summary(rep).c_str(), stdout);
    if (replacement) std::fprintf(stderr, "%s\n", replacement->describe().c_str());
    return rep.passed() ? 0 : 1;
  };
}

}  // namespace parity::cli
