#include "io/json_file.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "io/file_util.h"

namespace parity::io {

namespace {

struct Rewrite {
  std::size_t new_pos, new_len, old_pos, old_len;
};

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '+' ||
         c == '-';
}

// Bare Infinity / -Infinity / NaN are rewritten only where they stand as whole tokens outside
// strings; anything else (e.g. "Infinityx") is left for the JSON parser to reject.
std::string rewrite_bare_floats(const std::string& text, std::vector<Rewrite>& rewrites) {
  static constexpr std::string_view kTokens[] = {"-Infinity", "Infinity", "NaN"};
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size();) {
    char c = text[i];
    if (in_string) {
      out.push_back(c);
      if (c == '\\' && i + 1 < text.size()) {
        out.push_back(text[i + 1]);
        i += 2;
        continue;
      }
      if (c == '"') in_string = false;
      ++i;
      continue;
    }
    if (c == '"') {
      in_string = true;
      out.push_back(c);
      ++i;
      continue;
    }
    bool replaced = false;
    if ((c == '-' || c == 'I' || c == 'N') && (i == 0 || !is_word_char(text[i - 1]))) {
      for (std::string_view tok : kTokens) {
        if (text.compare(i, tok.size(), tok) != 0) continue;
        std::size_t end = i + tok.size();
        if (end < text.size() && is_word_char(text[end])) continue;
        std::string repl = "{\"__float__\":\"" + std::string(tok) + "\"}";
        rewrites.push_back({out.size(), repl.size(), i, tok.size()});
        out += repl;
        i = end;
        replaced = true;
        break;
      }
    }
    if (!replaced) {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

std::size_t original_offset(std::size_t pos, const std::vector<Rewrite>& rewrites) {
  std::size_t shift_new = 0, shift_old = 0;
  for (const Rewrite& r : rewrites) {
    if (pos < r.new_pos) break;
    if (pos < r.new_pos + r.new_len) return r.old_pos;
    shift_new = r.new_pos + r.new_len;
    shift_old = r.old_pos + r.old_len;
  }
  return pos - shift_new + shift_old;
}

}  // namespace

// nlohmann's message carries its own position (here, in the rewritten text); keep the reason.
std::string json_error_reason(const nlohmann::json::parse_error& e) {
  const std::string what = e.what();
  std::size_t col = what.find("column ");
  if (col != std::string::npos) {
    std::size_t colon = what.find(": ", col);
    if (colon != std::string::npos) return what.substr(colon + 2);
  }
  std::size_t bracket = what.find("] ");
  return bracket == std::string::npos ? what : what.substr(bracket + 2);
}

nlohmann::json parse_hf_json(const std::string& text, const std::string& what) {
  std::vector<Rewrite> rewrites;
  std::string rewritten = rewrite_bare_floats(text, rewrites);
  try {
    return nlohmann::json::parse(rewritten);
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte is 1-based and points at the last character read.
    std::size_t pos = e.byte > 0 ? original_offset(e.byte - 1, rewrites) : 0;
    if (pos > text.size()) pos = text.size();
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i < pos; ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    throw Error(what + ": invalid JSON at line " + std::to_string(line) + ", column " +
                std::to_string(column) + " (byte " + std::to_string(pos) +
                "): " + json_error_reason(e));
  } catch (const nlohmann::json::out_of_range&) {
    // nlohmann reports a float literal beyond double's range (1e400) this way, not as a parse_error.
    throw Error(what + ": invalid JSON: a number is outside the range of a double");
  }
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_hf_json(read_file_bytes(path), path);
}

double as_float(const nlohmann::json& v, const std::string& field) {
  if (v.is_number()) return v.get<double>();
  if (v.is_object() && v.size() == 1 && v.contains("__float__") && v["__float__"].is_string()) {
    const std::string& s = v["__float__"].get_ref<const std::string&>();
    if (s == "Infinity") return std::numeric_limits<double>::infinity();
    if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
    if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
    throw Error(field + ": unknown special float '" + s +
                "' (expected Infinity, -Infinity or NaN)");
  }
  throw Error(field + ": expected a number, got " + v.dump());
}

}  // namespace parity::io
