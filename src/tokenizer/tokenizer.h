#pragma once
// Text ↔ token ids for the models parity serves: a Hugging Face tokenizer.json with a byte-level
// BPE model (GPT-NeoX / Mamba2, Granite), giving the ids HF `tokenizers` gives. Parts a file may
// use: normalizer null / NFC (NFD, NFKC, NFKD, Sequence); pre-tokenizer ByteLevel, Split, Digits,
// Sequence; model BPE; added tokens with special / single_word / lstrip / rstrip / normalized;
// post-processor ByteLevel, TemplateProcessing, Sequence; decoder ByteLevel or none. Any other
// part is refused with a parity::Error that names it. truncation and padding are ignored, as
// transformers ignores them unless a call asks for them. See docs/tokenizer.md.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace parity::tokenizer {

class Tokenizer {
 public:
  // Throws parity::Error naming the unsupported part (model type, normalizer, pre-tokenizer,
  // decoder...). from_file also reads tokenizer_config.json (eos, bos, chat template) and
  // chat_template.jinja when they lie beside the file.
  static std::unique_ptr<Tokenizer> from_file(const std::string& tokenizer_json_path);
  static std::unique_ptr<Tokenizer> from_json(std::string_view json_text, const std::string& origin);
  ~Tokenizer();

  // Text must be valid UTF-8 (else parity::Error naming the byte offset).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // Ids with no token are skipped, as HF does; invalid UTF-8 in the bytes becomes U+FFFD.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  int vocab_size() const;  // including added tokens: largest id + 1
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  std::optional<int32_t> eos_token_id() const;  // from tokenizer_config.json / added tokens when known
  std::optional<int32_t> bos_token_id() const;
  const std::optional<std::string>& chat_template() const;  // tokenizer_config.json's, if any
  const std::string& origin() const;

  // The bytes one token contributes to a decode (before lossy UTF-8 conversion); `first` says
  // whether it is the first token kept (a tokenizer without decoder joins tokens with spaces).
  // Nothing when the id has no token or is a skipped special token.
  std::optional<std::string> token_bytes(int32_t id, bool skip_special_tokens, bool first) const;

  // Used by tokenizer_config.json reading and by the built-in tokenizer.
  void set_special_ids(std::optional<int32_t> bos, std::optional<int32_t> eos);
  void set_chat_template(std::optional<std::string> t);

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  friend std::unique_ptr<Tokenizer> make_tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Incremental detokenizer for streaming: returns only complete UTF-8 text; holds back a partial
// character. The concatenation of every push() and flush() equals decode() of all the ids.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& t, bool skip_special_tokens = false);
  std::string push(int32_t id);
  std::string flush();  // whatever is left (invalid trailing bytes become U+FFFD)

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  bool first_ = true;
  std::string pending_;  // bytes of an incomplete trailing character
};

// The tokenizer of a model spec as the CLI takes it (a checkpoint folder with tokenizer.json
// [+ tokenizer_config.json], or builtin:NAME → the built-in tokenizer); nullptr when a folder has none.
std::unique_ptr<Tokenizer> load_for_model(const std::string& model_spec);

}  // namespace parity::tokenizer
