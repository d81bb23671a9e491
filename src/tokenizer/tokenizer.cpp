#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "common/error.h"
#include "io/file_util.h"
#include "io/json_file.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer_config.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace parity::tokenizer {

namespace {

DecoderKind parse_decoder(const nlohmann::json& j) {
  if (j.is_null()) return DecoderKind::None;
  std::string type = json_fields::type_of(j, "decoder");
  if (type == "Sequence") {
    const nlohmann::json& list = json_fields::array_field(j, "decoders", "decoder");
    if (list.size() == 1) type = json_fields::type_of(list[0], "decoder");
    if (type == "Sequence") throw Error("unsupported decoder Sequence (parity supports ByteLevel or a Sequence of one ByteLevel)");
  }
  if (type == "ByteLevel") return DecoderKind::ByteLevel;
  throw Error("unsupported decoder '" + type + "' (parity supports ByteLevel or none)");
}

}  // namespace

std::unique_ptr<Tokenizer> make_tokenizer(std::unique_ptr<Tokenizer::Impl> impl) {
  return std::unique_ptr<Tokenizer>(new Tokenizer(std::move(impl)));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::from_json(std::string_view json_text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text.begin(), json_text.end());
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(origin + ": not valid JSON: " + io::json_error_reason(e));
  } catch (const nlohmann::json::exception& e) {  // e.g. a number past double's range (out_of_range 406)
    throw Error(origin + ": not valid JSON: " + e.what());
  }
  try {
    if (!j.is_object()) throw Error("the top level must be a JSON object");
    auto field = [&](const char* key) -> const nlohmann::json& {
      static const nlohmann::json null;
      auto it = j.find(key);
      return it == j.end() ? null : *it;
    };
    auto impl = std::make_unique<Impl>();
    impl->origin = origin;
    impl->normalizer = Normalizer::from_json(field("normalizer"));
    impl->pre_tokenizer = PreTokenizer::from_json(field("pre_tokenizer"));
    impl->model = BpeModel::from_json(field("model"));
    impl->added = AddedVocabulary(field("added_tokens"), *impl->model, *impl->normalizer);
    impl->post = PostProcessor::from_json(field("post_processor"));
    impl->decoder = parse_decoder(field("decoder"));
    // A tokenizer with no config: <|endoftext|> is the end of text when it is a special token
    // (GPT-2, GPT-NeoX), and the template's leading token is the BOS.
    if (auto id = impl->added.token_to_id("<|endoftext|>"); id && impl->added.is_special("<|endoftext|>"))
      impl->eos = id;
    impl->bos = impl->post.leading_id();
    return make_tokenizer(std::move(impl));
  } catch (const Error& e) {
    throw Error(origin + ": " + e.what());
  } catch (const nlohmann::json::exception& e) {
    throw Error(origin + ": malformed tokenizer.json: " + e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& tokenizer_json_path) {
  auto t = from_json(io::read_file_bytes(tokenizer_json_path), tokenizer_json_path);
  apply_tokenizer_config(*t, std::filesystem::path(tokenizer_json_path).parent_path().string());
  return t;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const std::size_t bad = utf8::first_invalid(text);
  if (bad != std::string_view::npos)
    throw Error("text is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  std::vector<int32_t> ids;
  for (const Piece& p : impl_->added.split(text, *impl_->normalizer)) {
    if (p.id) {
      ids.push_back(*p.id);
      continue;
    }
    for (const std::string& word : impl_->pre_tokenizer->apply(p.text)) impl_->model->encode_word(word, ids);
  }
  return add_special_tokens ? impl_->post.apply(std::move(ids)) : ids;
}

std::optional<std::string> Tokenizer::token_bytes(int32_t id, bool skip_special_tokens, bool first) const {
  const std::string* token = nullptr;
  if (const AddedToken* a = impl_->added.by_id(id)) token = &a->content;
  if (!token) token = impl_->model->id_to_token(id);
  if (!token) return std::nullopt;
  if (skip_special_tokens && impl_->added.is_special(*token)) return std::nullopt;
  if (impl_->decoder == DecoderKind::ByteLevel) {
    if (auto bytes = byte_level::decode(*token)) return bytes;
    return *token;
  }
  return first ? *token : " " + *token;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  bool first = true;
  for (int32_t id : ids) {
    if (auto b = token_bytes(id, skip_special_tokens, first)) {
      bytes += *b;
      first = false;
    }
  }
  std::string out;
  utf8::append_lossy(out, bytes);
  return out;
}

int Tokenizer::vocab_size() const { return std::max(impl_->model->max_id(), impl_->added.max_id()) + 1; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.token_to_id(token)) return id;
  return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* a = impl_->added.by_id(id)) return a->content;
  if (const std::string* t = impl_->model->id_to_token(id)) return *t;
  return std::nullopt;
}

std::optional<int32_t> Tokenizer::eos_token_id() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::bos_token_id() const { return impl_->bos; }
const std::optional<std::string>& Tokenizer::chat_template() const { return impl_->chat_template; }
const std::string& Tokenizer::origin() const { return impl_->origin; }

void Tokenizer::set_special_ids(std::optional<int32_t> bos, std::optional<int32_t> eos) {
  if (bos) impl_->bos = bos;
  if (eos) impl_->eos = eos;
}

void Tokenizer::set_chat_template(std::optional<std::string> t) { impl_->chat_template = std::move(t); }

StreamDecoder::StreamDecoder(const Tokenizer& t, bool skip_special_tokens) : tok_(t), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  auto b = tok_.token_bytes(id, skip_special_, first_);
  if (!b) return {};
  first_ = false;
  pending_ += *b;
  // Everything but an incomplete (still possibly valid) trailing character can be emitted;
  // invalid bytes inside become U+FFFD exactly as the whole-sequence decode makes them.
  const std::size_t hold = utf8::incomplete_tail(pending_);
  std::string out;
  utf8::append_lossy(out, std::string_view(pending_).substr(0, pending_.size() - hold));
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  utf8::append_lossy(out, pending_);
  pending_.clear();
  return out;
}

}  // namespace parity::tokenizer
