// parity generate: one request through the engine (scheduler, state cache, chunked prefill).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "engine/engine.h"
#include "frontends/cli/commands.h"
#include "frontends/cli/engine_flags.h"
#include "frontends/cli/serving_flags.h"
#include "frontends/cli/text_flags.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/model.h"

namespace parity::cli {

Runner add_generate(CLI::App& app) {
  struct Opts {
    EngineFlags engine;
    std::string model, prompt, forced, dump;
    int max_tokens = 0, top_k = 0, logprobs = 0;
    float temperature = 0.0f, top_p = 1.0f;
    uint64_t seed = 0;
    bool ignore_eos = false;
    std::vector<int32_t> stop;
    std::optional<std::string> prompt_text, forced_text;
    std::vector<std::string> more_prompts;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("generate", "Generate (or teacher-force) one request through the engine");
  sub->add_option("model", o->model, "checkpoint folder or builtin:NAME")->required();
  auto* p = sub->add_option("--prompt", o->prompt, "prompt tokens: JSON file, 1,2,3, or a .txt file (its text)");
  auto* pt = sub->add_option("--prompt-text", o->prompt_text, "prompt as text (the model's tokenizer encodes it)");
  p->excludes(pt);
  auto* f = sub->add_option("--forced", o->forced, "teacher-forced continuation tokens: JSON file, 1,2,3 or a .txt file");
  auto* ft = sub->add_option("--forced-text", o->forced_text, "teacher-forced continuation as text");
  f->excludes(ft);
  auto* m = sub->add_option("--max-tokens", o->max_tokens, "tokens to generate")->check(CLI::Range(1, 1 << 30));
  f->excludes(m);
  ft->excludes(m);
  sub->add_option("--add-prompt", o->more_prompts,
                  "another request with these prompt tokens (JSON file, 1,2,3 or .txt), run together with the "
                  "first and with its settings; repeat for more (the JSON then lists \"requests\")")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--dump-logits", o->dump, "write raw logits of positions P-1 … P+K-1 (safetensors 'logits')");
  sub->add_option("--temperature", o->temperature, "0 = greedy")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-k", o->top_k, "0 = off")->check(CLI::NonNegativeNumber);
  sub->add_option("--top-p", o->top_p, "1 = off")->check(CLI::Range(0.0, 1.0));
  sub->add_option("--seed", o->seed, "sampling seed");
  sub->add_option("--stop", o->stop, "stop token ids")->delimiter(',');
  sub->add_flag("--ignore-eos", o->ignore_eos,
                "keep generating after the tokenizer's end-of-sequence token (by default generation stops there, "
                "as in vLLM)");
  sub->add_option("--logprobs", o->logprobs, "top-N log-probs per token")->check(CLI::Range(0, 100));
  add_engine_flags(sub, o->engine);
  return [o]() {
    if (o->forced.empty() && !o->forced_text && o->max_tokens == 0)
      throw Error("generate needs --forced, --forced-text or --max-tokens");
    if (!o->more_prompts.empty() && !o->dump.empty()) throw Error("--dump-logits takes one request (no --add-prompt)");
    // An impossible configuration fails before the (possibly slow) model load.
    const nlohmann::json additional = o->engine.check();
    TextTokens text(o->model);
    engine::RequestSpec spec;
    spec.prompt = tokens_or_text(text, o->prompt, "--prompt", o->prompt_text, "--prompt-text", true, true);
    // A continuation is not a new text: no BOS or other template tokens.
    spec.forced = tokens_or_text(text, o->forced, "--forced", o->forced_text, "--forced-text", false, false);
    spec.sampling.max_tokens = o->max_tokens > 0 ? o->max_tokens : 1;
    spec.sampling.temperature = o->temperature;
    spec.sampling.top_k = o->top_k;
    spec.sampling.top_p = o->top_p;
    spec.sampling.seed = o->seed;
    spec.sampling.stop_token_ids = o->stop;
    // Generation ends at the tokenizer's EOS unless asked not to (a teacher-forced run never stops early).
    if (!o->ignore_eos && spec.forced.empty())
      if (const tokenizer::Tokenizer* tok = text.optional(nullptr))
        if (const auto eos = tok->eos_token_id()) spec.sampling.stop_token_ids.push_back(*eos);
    spec.sampling.logprobs = o->logprobs;
    spec.return_logits = !o->dump.empty();
    frontends::EngineSession session = frontends::open_engine(o->model, o->engine, additional);
    const model::Model& model = *session.model;
    engine::Engine& eng = *session.engine;
    std::fputs(eng.plan().describe().c_str(), stderr);
    const uint64_t id = eng.add_request(spec);
    std::vector<uint64_t> more;
    for (const std::string& t : o->more_prompts) {
      engine::RequestSpec s = spec;
      s.prompt = tokens_or_text(text, t, "--add-prompt", std::nullopt, "", true, true);
      more.push_back(eng.add_request(s));
    }
    auto results = eng.run_to_completion();
    const engine::RequestResult& r = results[id];
    nlohmann::json out;
    if (!more.empty()) {  // every request, the first included; the first's fields stay at the top too
      out["requests"] = nlohmann::json::array();
      more.insert(more.begin(), id);
      for (uint64_t i : more)
        out["requests"].push_back({{"tokens", results[i].tokens},
                                   {"finish_reason", engine::finish_reason_name(results[i].finish)},
                                   {"preemptions", results[i].num_preemptions}});
    }
    out["tokens"] = r.tokens;
    // The generated text, special tokens left out (as vLLM's default), when the model has a tokenizer.
    std::string why;
    if (const tokenizer::Tokenizer* tok = text.optional(&why))
      out["text"] = tok->decode(r.tokens, true);
    else if (why.find("has no tokenizer.json") == std::string::npos)
      std::fprintf(stderr, "note: no \"text\" in the output: %s\n", why.c_str());
    out["finish_reason"] = engine::finish_reason_name(r.finish);
    out["steps"] = eng.steps();
    out["preemptions"] = r.num_preemptions;
    out["mode"] = o->engine.numerics.exact ? "exact" : "plain";
    out["numerics"] = eng.numerics().metadata();
    if (eng.prefix_cache()) out["prefix_cache"] = prefix_cache_report(eng);
    if (eng.config().speculative.num_tokens > 0) out["speculative"] = speculation_report(eng);
    if (o->logprobs > 0) {
      nlohmann::json lp = nlohmann::json::array();
      for (const auto& v : r.logprobs) {
        nlohmann::json e = nlohmann::json::array();
        for (const auto& t : v) e.push_back({{"token", t.token}, {"logprob", t.logprob}});
        lp.push_back(e);
      }
      out["logprobs"] = lp;
    }
    if (!o->dump.empty()) {
      const int V = model.vocab_size();
      const int rows = static_cast<int>(r.logit_rows.size());
      std::vector<float> flat(std::size_t(rows) * V);
      for (int i = 0; i < rows; ++i) std::copy(r.logit_rows[i].begin(), r.logit_rows[i].end(), flat.begin() + std::size_t(i) * V);
      std::map<std::string, std::string> meta = eng.numerics().metadata();
      meta["model"] = model.origin();
      meta["mode"] = o->engine.numerics.exact ? "exact" : "plain";
      meta["command"] = "generate";
      meta["first_position"] = std::to_string(r.logit_positions.empty() ? 0 : r.logit_positions[0]);
      io::write_safetensors(o->dump, {{"logits", DType::F32, {rows, V}, flat.data()}}, meta);
    }
    if (session.replacement) std::fprintf(stderr, "%s\n", session.replacement->describe().c_str());
    std::printf("%s\n", out.dump().c_str());
    return 0;
  };
}

}  // namespace parity::cli
