// parity tokenize MODEL (--text S | --file F): the ids as a JSON array.
// parity detokenize MODEL --tokens T: the text (exactly, with no newline added).
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "frontends/cli/commands.h"
#include "frontends/cli/text_flags.h"
#include "io/file_util.h"
#include "io/token_file.h"

namespace parity::cli {

Runner add_tokenize(CLI::App& app) {
  struct Opts {
    std::string model, file;
    std::optional<std::string> text;
    bool no_special = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("tokenize", "Text to token ids with the model's tokenizer (prints a JSON array)");
  sub->add_option("model", o->model, "checkpoint folder (with tokenizer.json) or builtin:NAME")->required();
  auto* t = sub->add_option("--text", o->text, "the text");
  auto* f = sub->add_option("--file", o->file, "a file holding the text (UTF-8)");
  t->excludes(f);
  sub->add_flag("--no-special-tokens", o->no_special, "do not add the post-processor's special tokens (e.g. a BOS)");
  return [o]() {
    if (!o->text && o->file.empty()) throw Error("tokenize needs --text or --file");
    TextTokens tt(o->model);
    const std::string text = o->text ? *o->text : io::read_file_bytes(o->file);
    const std::string flag = o->text ? "--text" : "--file " + o->file;
    const std::vector<int32_t> ids = tt.require(flag).encode(text, !o->no_special);
    std::printf("%s\n", nlohmann::json(ids).dump().c_str());
    return 0;
  };
}

Runner add_detokenize(CLI::App& app) {
  struct Opts {
    std::string model, tokens;
    bool skip_special = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("detokenize", "Token ids to text with the model's tokenizer");
  sub->add_option("model", o->model, "checkpoint folder (with tokenizer.json) or builtin:NAME")->required();
  sub->add_option("--tokens", o->tokens, "token ids: JSON file or 1,2,3")->required();
  sub->add_flag("--skip-special-tokens", o->skip_special, "leave out special tokens (e.g. <|endoftext|>)");
  return [o]() {
    const std::vector<int32_t> ids = io::read_tokens(o->tokens);
    TextTokens tt(o->model);
    const std::string text = tt.require("detokenize").decode(ids, o->skip_special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  };
}

}  // namespace parity::cli
