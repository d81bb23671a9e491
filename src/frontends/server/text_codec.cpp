#include "frontends/server/text_codec.h"

namespace parity::server {

// Until the tokenizer library lands, no model has a tokenizer: requests with text get a 400.
std::unique_ptr<TextCodec> TextCodec::for_model(const std::string&) { return nullptr; }

}  // namespace parity::server
