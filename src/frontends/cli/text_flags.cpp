#include "frontends/cli/text_flags.h"

#include "common/error.h"
#include "frontends/common/model_tokenizer.h"
#include "io/file_util.h"
#include "io/token_file.h"

namespace parity::cli {

namespace {

bool is_txt(const std::string& spec) { return spec.size() > 4 && spec.compare(spec.size() - 4, 4, ".txt") == 0; }

}  // namespace

void TextTokens::load() {
  if (loaded_) return;
  loaded_ = true;
  tok_ = frontends::load_model_tokenizer(model_, error_);
}

const tokenizer::Tokenizer& TextTokens::require(const std::string& flag) {
  load();
  if (!tok_) throw Error(flag + " needs the model's tokenizer: " + error_);
  return *tok_;
}

const tokenizer::Tokenizer* TextTokens::optional(std::string* why) {
  load();
  if (!tok_ && why) *why = error_;
  return tok_.get();
}

std::vector<int32_t> TextTokens::from_text(const std::string& text, const std::string& flag, bool add_special_tokens) {
  std::vector<int32_t> ids;
  try {
    ids = require(flag).encode(text, add_special_tokens);
  } catch (const Error& e) {
    const std::string msg = e.what();
    throw Error(msg.rfind(flag, 0) == 0 ? msg : flag + ": " + msg);
  }
  if (ids.empty()) throw Error(flag + ": the text encodes to no tokens");
  return ids;
}

std::vector<int32_t> TextTokens::from_spec(const std::string& spec, const std::string& flag, bool add_special_tokens) {
  if (is_txt(spec)) return from_text(io::read_file_bytes(spec), flag + " " + spec, add_special_tokens);
  return io::read_tokens(spec);
}

std::vector<int32_t> tokens_or_text(TextTokens& t, const std::string& spec, const std::string& spec_flag,
                                    const std::optional<std::string>& text, const std::string& text_flag,
                                    bool add_special_tokens, bool required) {
  if (!spec.empty() && text) throw Error("give " + spec_flag + " or " + text_flag + ", not both");
  if (text) return t.from_text(*text, text_flag, add_special_tokens);
  if (!spec.empty()) return t.from_spec(spec, spec_flag, add_special_tokens);
  if (required) throw Error(spec_flag + " or " + text_flag + " is required");
  return {};
}

}  // namespace parity::cli
