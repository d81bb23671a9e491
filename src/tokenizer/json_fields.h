#pragma once
// Typed field access for tokenizer.json sections: every wrong type or missing field becomes a
// parity::Error that names the section and the field (the file is user input, and fuzzed).
#include <string>

#include <nlohmann/json.hpp>

namespace parity::tokenizer::json_fields {

std::string type_of(const nlohmann::json& node, const std::string& where);  // node["type"]
bool bool_field(const nlohmann::json& node, const char* key, const std::string& where, bool fallback);
std::string string_field(const nlohmann::json& node, const char* key, const std::string& where);
const nlohmann::json& array_field(const nlohmann::json& node, const char* key, const std::string& where);
const nlohmann::json& object_field(const nlohmann::json& node, const char* key, const std::string& where);
int32_t id_value(const nlohmann::json& v, const std::string& where);  // 0 … INT32_MAX - 1

}  // namespace parity::tokenizer::json_fields
