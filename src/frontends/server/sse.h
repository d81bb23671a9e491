#pragma once
// Server-sent events as OpenAI's streaming API writes them: each chunk one `data: <json>` event,
// the stream closed by `data: [DONE]`; comment lines keep an idle stream alive (and let the
// server notice a client that went away).
#include <string>

#include <nlohmann/json.hpp>

namespace parity::server {

// "data: <compact json>\n\n" — compact JSON never holds a raw newline, so one event is one line.
std::string sse_event(const nlohmann::json& payload);
std::string sse_done();       // "data: [DONE]\n\n"
std::string sse_keepalive();  // ": keep-alive\n\n", ignored by SSE clients

}  // namespace parity::server
