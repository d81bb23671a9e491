#include "frontends/server/sse.h"

namespace parity::server {

std::string sse_event(const nlohmann::json& payload) {
  // Invalid UTF-8 (a token ending inside a character is held back, but a model can emit any
  // bytes) becomes U+FFFD instead of an exception: the stream must never die on its content.
  return "data: " + payload.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_keepalive() { return ": keep-alive\n\n"; }

}  // namespace parity::server
