#include "frontends/server/text_codec.h"

#include "tokenizer/tokenizer.h"

namespace parity::server {

namespace {

class TokenizerStream : public TextStream {
 public:
  TokenizerStream(const tokenizer::Tokenizer& t, bool skip) : dec_(t, skip) {}
  std::string push(int32_t id) override { return dec_.push(id); }
  std::string flush() override { return dec_.flush(); }

 private:
  tokenizer::StreamDecoder dec_;
};

class TokenizerCodec : public TextCodec {
 public:
  explicit TokenizerCodec(std::unique_ptr<tokenizer::Tokenizer> t) : t_(std::move(t)) {
    if (auto id = t_->bos_token_id()) bos_ = t_->id_to_token(*id);
    if (auto id = t_->eos_token_id()) eos_ = t_->id_to_token(*id);
  }
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override {
    return t_->encode(text, add_special_tokens);
  }
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const override {
    return t_->decode(ids, skip_special_tokens);
  }
  std::unique_ptr<TextStream> stream(bool skip_special_tokens) const override {
    return std::make_unique<TokenizerStream>(*t_, skip_special_tokens);
  }
  // A token's own text (a token that ends inside a UTF-8 character shows U+FFFD, as vLLM's tables do).
  std::string token_text(int32_t id) const override { return t_->decode({id}, false); }
  std::optional<int32_t> eos_token_id() const override { return t_->eos_token_id(); }
  std::optional<std::string> bos_token() const override { return bos_; }
  std::optional<std::string> eos_token() const override { return eos_; }
  const std::optional<std::string>& chat_template() const override { return t_->chat_template(); }

 private:
  std::unique_ptr<tokenizer::Tokenizer> t_;
  std::optional<std::string> bos_, eos_;
};

}  // namespace

std::unique_ptr<TextCodec> TextCodec::for_model(const std::string& model_spec) {
  auto t = tokenizer::load_for_model(model_spec);
  if (!t) return nullptr;
  return std::make_unique<TokenizerCodec>(std::move(t));
}

}  // namespace parity::server
