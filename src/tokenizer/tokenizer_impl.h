#pragma once
// The parts a Tokenizer is made of (internal to src/tokenizer/).
#include <memory>
#include <optional>
#include <string>

#include "tokenizer/added_vocabulary.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace parity::tokenizer {

enum class DecoderKind { None, ByteLevel };

struct Tokenizer::Impl {
  std::string origin;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  AddedVocabulary added;
  PostProcessor post;
  DecoderKind decoder = DecoderKind::None;
  std::optional<int32_t> bos, eos;
  std::optional<std::string> chat_template;
};

std::unique_ptr<Tokenizer> make_tokenizer(std::unique_ptr<Tokenizer::Impl> impl);

}  // namespace parity::tokenizer
