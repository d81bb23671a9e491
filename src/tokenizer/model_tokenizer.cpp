// load_for_model: where a model spec's tokenizer comes from.
#include <filesystem>

#include "model/builtin.h"
#include "tokenizer/builtin_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace parity::tokenizer {

std::unique_ptr<Tokenizer> load_for_model(const std::string& model_spec) {
  namespace fs = std::filesystem;
  const std::string prefix = "builtin:";
  if (model_spec.rfind(prefix, 0) == 0) {
    const std::string name = model_spec.substr(prefix.size());
    auto t = Tokenizer::from_json(builtin_tokenizer_json(model::builtin_vocab_size(name)), "builtin tokenizer of " + model_spec);
    return t;
  }
  const fs::path file = fs::path(model_spec) / "tokenizer.json";
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return nullptr;
  return Tokenizer::from_file(file.string());
}

}  // namespace parity::tokenizer
