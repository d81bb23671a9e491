#include "accuracy/additional_config.h"

#include <set>

#include "common/error.h"
#include "io/json_file.h"

namespace parity::accuracy {

namespace {

const char* kWhere = "--additional-config";

std::string keys_list(const std::set<std::string>& keys) {
  std::string s;
  for (const auto& k : keys) s += (s.empty() ? "" : ", ") + k;
  return s;
}

void check_keys(const nlohmann::json& obj, const std::set<std::string>& known, const std::string& where) {
  for (const auto& [k, v] : obj.items())
    if (!known.count(k))
      throw Error(std::string(kWhere) + ": unknown key \"" + k + "\" in " + where + " (known: " + keys_list(known) +
                  ")");
}

std::string get_string(const nlohmann::json& obj, const std::string& key) {
  const auto& v = obj.at(key);
  if (!v.is_string())
    throw Error(std::string(kWhere) + ": tensor_replacement." + key + " must be a string, not " + v.dump());
  return v.get<std::string>();
}

}  // namespace

nlohmann::json parse_additional_config(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw Error(std::string(kWhere) + ": not valid JSON: " + io::json_error_reason(e) + " (at byte " +
                std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::out_of_range&) {
    throw Error(std::string(kWhere) + ": not valid JSON: a number is outside the range of a double");
  }
  if (!j.is_object()) throw Error(std::string(kWhere) + ": expected a JSON object, got " + j.dump());
  return j;
}

std::optional<ReplacementConfig> replacement_config_from_json(const nlohmann::json& additional) {
  if (!additional.is_object()) throw Error(std::string(kWhere) + ": expected a JSON object");
  check_keys(additional, {"tensor_replacement"}, "the top level");
  if (!additional.contains("tensor_replacement")) return std::nullopt;
  const auto& tr = additional.at("tensor_replacement");
  if (!tr.is_object()) throw Error(std::string(kWhere) + ": tensor_replacement must be an object");
  check_keys(tr,
             {"tensors_path", "prompt_token_ids_path", "on_missing_position", "modules", "allow_dtype_widening"},
             "tensor_replacement");
  if (!tr.contains("tensors_path"))
    throw Error(std::string(kWhere) + ": tensor_replacement needs \"tensors_path\" (a captures file); in-memory "
                "tensors are for the C++ API");
  ReplacementConfig c;
  c.tensors_path = get_string(tr, "tensors_path");
  if (tr.contains("prompt_token_ids_path")) c.prompt_token_ids_path = get_string(tr, "prompt_token_ids_path");
  if (tr.contains("on_missing_position"))
    c.on_missing_position = missing_position_from_name(get_string(tr, "on_missing_position"));
  if (tr.contains("modules")) {
    const auto& m = tr.at("modules");
    if (!m.is_array()) throw Error(std::string(kWhere) + ": tensor_replacement.modules must be a list of names");
    for (const auto& n : m) {
      if (!n.is_string())
        throw Error(std::string(kWhere) + ": tensor_replacement.modules holds " + n.dump() + ", not a name");
      c.modules.push_back(n.get<std::string>());
    }
    if (c.modules.empty()) throw Error(std::string(kWhere) + ": tensor_replacement.modules is empty");
  }
  if (tr.contains("allow_dtype_widening")) {
    const auto& w = tr.at("allow_dtype_widening");
    if (!w.is_boolean())
      throw Error(std::string(kWhere) + ": tensor_replacement.allow_dtype_widening must be true or false");
    c.allow_dtype_widening = w.get<bool>();
  }
  return c;
}

std::unique_ptr<ReplacementSession> make_replacement_from_additional_config(const nlohmann::json& additional,
                                                                            const model::Model& model) {
  auto cfg = replacement_config_from_json(additional);
  if (!cfg) return nullptr;
  return std::make_unique<ReplacementSession>(std::move(*cfg), model);
}

}  // namespace parity::accuracy
