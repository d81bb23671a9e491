#pragma once
// A model's tokenizer as every frontend looks for it: tokenizer.json in the checkpoint folder, or
// builtin:NAME's built-in one. A model without a usable one still runs on token ids, so its
// absence is not an error here: the frontend refuses text later, giving the reason.
#include <memory>
#include <string>

#include "tokenizer/tokenizer.h"

namespace parity::frontends {

// The tokenizer, or null with the reason in `why` ("M has no tokenizer.json", or why parity
// cannot run the one there).
std::unique_ptr<tokenizer::Tokenizer> load_model_tokenizer(const std::string& model_spec, std::string& why);

}  // namespace parity::frontends
