#include "tokenizer/json_fields.h"

#include <limits>

#include "common/error.h"

namespace parity::tokenizer::json_fields {

namespace {

const nlohmann::json* find(const nlohmann::json& node, const char* key, const std::string& where) {
  if (!node.is_object()) throw Error(where + " must be a JSON object");
  auto it = node.find(key);
  return it == node.end() || it->is_null() ? nullptr : &*it;
}

}  // namespace

std::string type_of(const nlohmann::json& node, const std::string& where) {
  const nlohmann::json* t = find(node, "type", where);
  if (!t || !t->is_string()) throw Error(where + " has no \"type\" string");
  return t->get<std::string>();
}

bool bool_field(const nlohmann::json& node, const char* key, const std::string& where, bool fallback) {
  const nlohmann::json* v = find(node, key, where);
  if (!v) return fallback;
  if (!v->is_boolean()) throw Error(where + ": \"" + key + "\" must be true or false");
  return v->get<bool>();
}

std::string string_field(const nlohmann::json& node, const char* key, const std::string& where) {
  const nlohmann::json* v = find(node, key, where);
  if (!v || !v->is_string()) throw Error(where + ": \"" + key + "\" must be a string");
  return v->get<std::string>();
}

const nlohmann::json& array_field(const nlohmann::json& node, const char* key, const std::string& where) {
  const nlohmann::json* v = find(node, key, where);
  if (!v || !v->is_array()) throw Error(where + ": \"" + key + "\" must be an array");
  return *v;
}

const nlohmann::json& object_field(const nlohmann::json& node, const char* key, const std::string& where) {
  const nlohmann::json* v = find(node, key, where);
  if (!v || !v->is_object()) throw Error(where + ": \"" + key + "\" must be an object");
  return *v;
}

int32_t id_value(const nlohmann::json& v, const std::string& where) {
  // The largest id is INT32_MAX - 1, so that the vocabulary size (largest id + 1) is an int too.
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max() - 1;
  if (!v.is_number_integer()) throw Error(where + ": id " + v.dump() + " is not an integer");
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > static_cast<uint64_t>(kMax)) throw Error(where + ": id " + v.dump() + " is too large");
    return static_cast<int32_t>(v.get<uint64_t>());
  }
  const int64_t s = v.get<int64_t>();
  if (s < 0 || s > kMax) throw Error(where + ": id " + v.dump() + " is out of range");
  return static_cast<int32_t>(s);
}

}  // namespace parity::tokenizer::json_fields
