#pragma once
// The server's view of a model's tokenizer: text to ids, ids to text (whole or streamed one token
// at a time), the end-of-sequence token and the chat template. The only file that knows the
// tokenizer library is text_codec.cpp; everything else in the server talks to this class, and a
// model without a tokenizer has none (nullptr), so text requests get a clear 400.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace parity::server {

// Turns a token stream into text as it grows: push one id, get the text it completes (a token
// that ends inside a UTF-8 character yields nothing until the character is whole).
class TextStream {
 public:
  virtual ~TextStream() = default;
  virtual std::string push(int32_t id) = 0;
  virtual std::string flush() = 0;
};

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // The tokenizer of MODEL (a checkpoint folder with tokenizer.json, or a built-in model's);
  // nullptr when the model has none.
  static std::unique_ptr<TextCodec> for_model(const std::string& model_spec);

  virtual std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const = 0;
  virtual std::unique_ptr<TextStream> stream(bool skip_special_tokens) const = 0;
  // One token's text as the logprobs tables show it.
  virtual std::string token_text(int32_t id) const = 0;
  virtual std::optional<int32_t> eos_token_id() const = 0;
  virtual std::optional<std::string> bos_token() const = 0;
  virtual std::optional<std::string> eos_token() const = 0;
  virtual const std::optional<std::string>& chat_template() const = 0;
};

}  // namespace parity::server
