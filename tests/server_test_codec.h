#pragma once
// A stand-in tokenizer for the server's unit tests: one token per byte (id = byte value + 1),
// id 0 the end-of-sequence token "</s>". Lets the parser and text paths be tested without any
// tokenizer file.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "frontends/server/text_codec.h"

namespace parity::test {

class ByteCodec : public server::TextCodec {
 public:
  std::optional<std::string> tmpl;
  std::vector<int32_t> encode(std::string_view text, bool add_special) const override {
    std::vector<int32_t> ids;
    if (add_special) ids.push_back(0);
    for (unsigned char c : text) ids.push_back(int32_t(c) + 1);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) s += id == 0 ? (skip_special ? "" : "</s>") : std::string(1, char(id - 1));
    return s;
  }
  class Stream : public server::TextStream {
   public:
    explicit Stream(bool skip) : skip_(skip) {}
    std::string push(int32_t id) override { return id == 0 ? (skip_ ? "" : "</s>") : std::string(1, char(id - 1)); }
    std::string flush() override { return {}; }
    bool skip_;
  };
  std::unique_ptr<server::TextStream> stream(bool skip) const override { return std::make_unique<Stream>(skip); }
  std::string token_text(int32_t id) const override { return decode({id}, false); }
  std::optional<int32_t> eos_token_id() const override { return 0; }
  std::optional<std::string> bos_token() const override { return "<s>"; }
  std::optional<std::string> eos_token() const override { return "</s>"; }
  const std::optional<std::string>& chat_template() const override { return tmpl; }
};

}  // namespace parity::test
