#include "frontends/common/model_tokenizer.h"

#include "common/error.h"

namespace parity::frontends {

std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const std::string& model_spec, std::string& why) {
  try {
    auto t = tokenizer::load_for_model(model_spec);
    if (!t) why = model_spec + " has no tokenizer.json";
    return t;
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

}  // namespace parity::frontends
