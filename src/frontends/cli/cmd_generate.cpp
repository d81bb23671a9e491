// parity generate: one request through the engine (scheduler, state cache, chunked prefill).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "accuracy/additional_config.h"
#include "common/error.h"
#include "engine/engine.h"
#include "frontends/cli/commands.h"
#include "frontends/cli/device_flags.h"
#include "frontends/cli/moe_routing_flag.h"
#include "frontends/cli/numerics_flags.h"
#include "frontends/cli/serving_flags.h"
#include "frontends/cli/text_flags.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "kernels/isa.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace parity::cli {

Runner add_generate(CLI::App& app) {
  struct Opts {
    DeviceFlags dev;
    std::string model, prompt, forced, dump, additional, moe_routing;
    int max_tokens = 0, threads = 0, max_batched = 2048, max_seqs = 8, top_k = 0, logprobs = 0;
    int64_t preempt_at = -1, max_model_len = 1 << 20;
    NumericsFlags num;
    float temperature = 0.0f, top_p = 1.0f;
    uint64_t seed = 0;
    double state_mb = 0;
    bool ignore_eos = false;
    std::vector<int32_t> stop;
    std::optional<std::string> prompt_text, forced_text;
    std::vector<std::string> more_prompts;
    ServingFlags serving;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("generate", "Generate (or teacher-force) one request through the engine");
  sub->add_option("model", o->model, "checkpoint folder or builtin:NAME")->required();
  add_device_flags(sub, o->dev);
  auto* p = sub->add_option("--prompt", o->prompt, "prompt tokens: JSON file, 1,2,3, or a .txt file (its text)");
  auto* pt = sub->add_option("--prompt-text", o->prompt_text, "prompt as text (the model's tokenizer encodes it)");
  p->excludes(pt);
  auto* f = sub->add_option("--forced", o->forced, "teacher-forced continuation tokens: JSON file, 1,2,3 or a .txt file");
  auto* ft = sub->add_option("--forced-text", o->forced_text, "teacher-forced continuation as text");
  f->excludes(ft);
  auto* m = sub->add_option("--max-tokens", o->max_tokens, "tokens to generate")->check(CLI::Range(1, 1 << 30));
  f->excludes(m);
  ft->excludes(m);
  add_numerics_flags(sub, o->num);
  add_serving_flags(sub, o->serving);
  sub->add_option("--add-prompt", o->more_prompts,
                  "another request with these prompt tokens (JSON file, 1,2,3 or .txt), run together with the "
                  "first and with its settings; repeat for more (the JSON then lists \"requests\")")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  sub->add_option("--max-num-batched-tokens", o->max_batched, "token budget per pass")->check(CLI::Range(1, 1 << 24));
  sub->add_option("--max-num-seqs", o->max_seqs, "sequences per pass")->check(CLI::Range(1, 4096));
  sub->add_option("--max-model-len", o->max_model_len, "longest request (prompt + continuation)")->check(CLI::PositiveNumber);
  sub->add_option("--state-memory-mb", o->state_mb, "state + KV cache budget in MiB (default: one slot per sequence, KV for 4096 tokens each)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--preempt-at-step", o->preempt_at, "preempt every running request at this step (then recompute)")
      ->check(CLI::PositiveNumber);
  sub->add_option("--threads", o->threads, "worker threads (default: all cores)")->check(CLI::Range(1, 1024));
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
  sub->add_option("--additional-config", o->additional, "JSON, e.g. {\"tensor_replacement\": {\"tensors_path\": …}}");
  add_moe_routing_flag(sub, o->moe_routing);
  return [o]() {
    if (o->forced.empty() && !o->forced_text && o->max_tokens == 0)
      throw Error("generate needs --forced, --forced-text or --max-tokens");
    if (o->threads > 0) kernels::set_num_threads(o->threads);
    if (!o->more_prompts.empty() && !o->dump.empty()) throw Error("--dump-logits takes one request (no --add-prompt)");
    o->serving.check();
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
    engine::EngineConfig cfg;
    o->num.apply(cfg);
    cfg.sched.max_num_batched_tokens = o->max_batched;
    cfg.sched.max_num_seqs = o->max_seqs;
    cfg.max_model_len = o->max_model_len;
    cfg.preempt_at_step = o->preempt_at;
    cfg.state_memory_budget = static_cast<std::size_t>(o->state_mb * 1024.0 * 1024.0);
    o->num.check();  // an impossible configuration fails before the (possibly slow) model load
    const nlohmann::json additional =
        o->additional.empty() ? nlohmann::json::object() : accuracy::parse_additional_config(o->additional);
    accuracy::replacement_config_from_json(additional);

    auto model = o->dev.load(o->model, model_options(o->moe_routing));
    const auto draft = o->serving.load_draft();
    o->serving.apply(cfg, draft.get());
    engine::Engine eng(*model, cfg);
    auto replacement = accuracy::make_replacement_from_additional_config(additional, *model);
    if (replacement) replacement->attach(eng);
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
    out["mode"] = o->num.exact ? "exact" : "plain";
    out["numerics"] = eng.numerics().metadata();
    if (eng.prefix_cache()) out["prefix_cache"] = prefix_cache_report(eng);
    if (cfg.speculative.num_tokens > 0) out["speculative"] = speculation_report(eng);
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
      const int V = model->vocab_size();
      const int rows = static_cast<int>(r.logit_rows.size());
      std::vector<float> flat(std::size_t(rows) * V);
      for (int i = 0; i < rows; ++i) std::copy(r.logit_rows[i].begin(), r.logit_rows[i].end(), flat.begin() + std::size_t(i) * V);
      std::map<std::string, std::string> meta = eng.numerics().metadata();
      meta["model"] = model->origin();
      meta["mode"] = o->num.exact ? "exact" : "plain";
      meta["command"] = "generate";
      meta["first_position"] = std::to_string(r.logit_positions.empty() ? 0 : r.logit_positions[0]);
      io::write_safetensors(o->dump, {{"logits", DType::F32, {rows, V}, flat.data()}}, meta);
    }
    if (replacement) std::fprintf(stderr, "%s\n", replacement->describe().c_str());
    std::printf("%s\n", out.dump().c_str());
    return 0;
  };
}

}  // namespace parity::cli
