// parity score MODEL --tokens T --out F [--exact …]: one single-shot prefill over all of T; row t
// of the `logits` tensor is the distribution after tokens[0..t]. Plain mode is the standard
// chunked scan at the model's chunk_size; --exact uses exact mode's grid, so its rows equal what
// `generate --exact` produces under any schedule (the trainer's scoring pass).
#include <cstdio>
#include <memory>
#include <string>

#include "accuracy/additional_config.h"
#include "frontends/cli/commands.h"
#include "frontends/cli/engine_flags.h"
#include "frontends/cli/text_flags.h"
#include "io/file_util.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/builtin.h"
#include "model/checkpoint.h"
#include "model/model.h"
#include "tokenizer/builtin_tokenizer.h"

namespace parity::cli {

Runner add_score(CLI::App& app) {
  struct Opts {
    EngineFlags engine;  // the model's: score runs no engine (no scheduler, cache or serving flags)
    std::string model, tokens, out;
    std::optional<std::string> text;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("score", "Single-shot prefill over a token list; writes every row's logits");
  sub->add_option("model", o->model, "checkpoint folder or builtin:NAME")->required();
  auto* tk = sub->add_option("--tokens", o->tokens, "JSON file with an array of token ids, 1,2,3, or a .txt file (its text)");
  auto* tx = sub->add_option("--text", o->text, "the text to score (the model's tokenizer encodes it)");
  tk->excludes(tx);
  sub->add_option("--out", o->out, "output safetensors file (tensor 'logits' [rows, vocab] F32)")->required();
  add_engine_flags(sub, o->engine,
                   {.serving = false, .max_num_batched_tokens = false, .max_num_seqs = false, .max_model_len = false,
                    .state_memory = false, .preempt = false});
  return [o]() {
    const nlohmann::json additional = o->engine.check();  // a bad config fails before the model loads
    TextTokens text(o->model);
    std::vector<int32_t> tokens = tokens_or_text(text, o->tokens, "--tokens", o->text, "--text", true, true);
    auto model = o->engine.load(o->model);
    // The scored stream is one request without an id (rows report request 0): prefix matching
    // of its tokens picks the reference prompt.
    auto replacement = accuracy::make_replacement_from_additional_config(additional, *model);
    if (replacement) replacement->replacer().register_request(0, tokens);
    const int n = static_cast<int>(tokens.size());
    const int V = model->vocab_size();
    const cache::Numerics numerics = o->engine.numerics.resolve(*model);
    std::vector<float> logits =
        model::score_all_rows(*model, tokens, numerics, replacement ? &replacement->hooks() : nullptr);
    if (replacement) std::fprintf(stderr, "%s\n", replacement->describe().c_str());
    std::map<std::string, std::string> meta = numerics.metadata();
    meta["model"] = model->origin();
    meta["command"] = "score";
    io::write_safetensors(o->out, {{"logits", DType::F32, {n, V}, logits.data()}}, meta);
    std::fprintf(stderr, "score: %d rows, numerics %s\n", n, numerics.describe().c_str());
    return 0;
  };
}

Runner add_export(CLI::App& app) {
  struct Opts {
    std::string model, out;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("export", "Write a model (e.g. builtin:tiny) as a Hugging Face checkpoint folder");
  sub->add_option("model", o->model, "builtin:NAME or checkpoint folder")->required();
  sub->add_option("--out", o->out, "output folder")->required();
  return [o]() {
    model::Checkpoint ck = model::open_checkpoint(o->model);
    model::load_model(ck);  // validate before writing anything
    model::save_checkpoint(ck, o->out);
    // A built-in model's folder gets its (synthetic) tokenizer, so text works on the export too.
    const std::string prefix = "builtin:";
    if (o->model.rfind(prefix, 0) == 0) {
      const std::string json = tokenizer::builtin_tokenizer_json(model::builtin_vocab_size(o->model.substr(prefix.size())));
      const std::string config = "{\n  \"eos_token\": \"<|endoftext|>\",\n  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n";
      io::write_file_atomic(o->out + "/tokenizer.json", {json});
      io::write_file_atomic(o->out + "/tokenizer_config.json", {config});
    }
    return 0;
  };
}

}  // namespace parity::cli
