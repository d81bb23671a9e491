#pragma once
// Text where token ids are accepted. Every command that takes token ids also takes text, encoded
// with the model's tokenizer (tokenizer.json in the checkpoint folder, or the built-in tokenizer
// of builtin:NAME): a token spec that names a .txt file is that file's text, and the commands
// add --prompt-text / --forced-text / --text beside their id flags. A model without a tokenizer
// gets a clear error when text is given; with ids only, no tokenizer is needed.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "tokenizer/tokenizer.h"

namespace parity::cli {

class TextTokens {
 public:
  explicit TextTokens(std::string model_spec) : model_(std::move(model_spec)) {}

  // A token spec as io::read_tokens takes it, or a path ending in .txt: its text, encoded.
  std::vector<int32_t> from_spec(const std::string& spec, const std::string& flag, bool add_special_tokens);
  // Text given on the command line (flag names it in errors).
  std::vector<int32_t> from_text(const std::string& text, const std::string& flag, bool add_special_tokens);

  // The tokenizer; parity::Error saying the model has none (or why it cannot be used) naming `flag`.
  const tokenizer::Tokenizer& require(const std::string& flag);
  // The tokenizer when the model has a usable one; nullptr (and the reason in *why) otherwise.
  const tokenizer::Tokenizer* optional(std::string* why = nullptr);

 private:
  void load();
  std::string model_;
  bool loaded_ = false;
  std::unique_ptr<tokenizer::Tokenizer> tok_;
  std::string error_;
};

// Tokens for an option pair like --prompt / --prompt-text: exactly one must be given when
// `required`; returns empty when neither is.
std::vector<int32_t> tokens_or_text(TextTokens& t, const std::string& spec, const std::string& spec_flag,
                                    const std::optional<std::string>& text, const std::string& text_flag,
                                    bool add_special_tokens, bool required);

}  // namespace parity::cli
