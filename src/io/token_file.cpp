#include "io/token_file.h"

#include <cctype>
#include <filesystem>
#include <limits>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "io/file_util.h"
#include "io/json_file.h"

namespace parity::io {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_integer_text(std::string_view s) {
  if (!s.empty() && (s.front() == '-' || s.front() == '+')) s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  return true;
}

// A spec that is not a file is taken as an inline list when it could not be meant as a path:
// it has a comma, or it is a single integer. Anything else reads as a mistyped file name.
bool looks_inline(std::string_view spec) {
  if (spec.find('/') != std::string_view::npos) return false;
  if (spec.find(',') != std::string_view::npos) return true;
  std::string_view t = trim(spec);
  return t.empty() || is_integer_text(t);
}

// `text` is how the entry was written, so the message shows it even when it does not fit.
int32_t checked_id(bool negative, uint64_t magnitude, const std::string& text,
                   const std::string& where) {
  if (negative && magnitude != 0) throw Error(where + " is negative (" + text + ")");
  if (magnitude > static_cast<uint64_t>(std::numeric_limits<int32_t>::max()))
    throw Error(where + " (" + text + ") is too large for a token id");
  return static_cast<int32_t>(magnitude);
}

std::vector<int32_t> parse_inline(std::string_view spec) {
  std::vector<int32_t> out;
  if (trim(spec).empty()) throw Error("token list is empty");
  for (std::size_t index = 0;; ++index) {
    std::size_t comma = spec.find(',');
    std::string_view item = trim(spec.substr(0, comma));
    const std::string where = "token list entry " + std::to_string(index);
    if (item.empty()) throw Error(where + " is empty");
    if (!is_integer_text(item))
      throw Error(where + " ('" + std::string(item) + "') is not an integer");
    std::string_view digits = item;
    bool neg = false;
    if (digits.front() == '-' || digits.front() == '+') {
      neg = digits.front() == '-';
      digits.remove_prefix(1);
    }
    // Saturate instead of overflowing: anything past int32 is refused by checked_id anyway.
    uint64_t v = 0;
    for (char c : digits) {
      v = v * 10 + static_cast<uint64_t>(c - '0');
      if (v > (1ull << 40)) break;
    }
    out.push_back(checked_id(neg, v, std::string(item), where));
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
  }
  return out;
}

std::vector<int32_t> parse_file(const std::string& path) {
  nlohmann::json j = read_json_file(path);
  if (!j.is_array()) throw Error(path + ": token file must be a JSON array of integers");
  if (j.empty()) throw Error(path + ": token list is empty");
  std::vector<int32_t> out;
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string where = path + ": entry " + std::to_string(i);
    const nlohmann::json& v = j[i];
    if (!v.is_number_integer()) throw Error(where + " (" + v.dump() + ") is not an integer");
    if (v.is_number_unsigned()) {
      out.push_back(checked_id(false, v.get<uint64_t>(), v.dump(), where));
    } else {
      int64_t s = v.get<int64_t>();
      uint64_t mag = s < 0 ? 0 - static_cast<uint64_t>(s) : static_cast<uint64_t>(s);
      out.push_back(checked_id(s < 0, mag, v.dump(), where));
    }
  }
  return out;
}

}  // namespace

std::vector<int32_t> read_tokens(const std::string& spec) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!spec.empty() && fs::exists(spec, ec)) {
    if (fs::is_directory(spec, ec)) throw Error(spec + ": is a directory, not a token file");
    return parse_file(spec);
  }
  if (looks_inline(spec)) return parse_inline(spec);
  throw Error("no such token file: " + spec);
}

void write_tokens_json(const std::string& path, const std::vector<int32_t>& tokens) {
  std::string text = "[";
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(tokens[i]);
  }
  text += "]\n";
  write_file_atomic(path, {text});
}

}  // namespace parity::io
