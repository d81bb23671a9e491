#pragma once
// JSON as Hugging Face writes it. Older transformers write bare `Infinity`, `-Infinity` and
// `NaN` tokens (not valid JSON); transformers 5.x writes {"__float__": "Infinity"}. Both are
// accepted: bare tokens are rewritten outside strings before parsing, and as_float() decodes
// the object form.
#include <string>

#include <nlohmann/json.hpp>

namespace parity::io {

nlohmann::json read_json_file(const std::string& path);     // throws parity::Error naming the file
nlohmann::json parse_hf_json(const std::string& text, const std::string& what);
double as_float(const nlohmann::json& v, const std::string& field);  // numbers and {"__float__": …}

// The reason part of a parse error ("syntax error while parsing …"), without nlohmann's own
// exception id and position, for callers that report the position in their own terms.
std::string json_error_reason(const nlohmann::json::parse_error& e);

}  // namespace parity::io
