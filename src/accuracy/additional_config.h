#pragma once
// --additional-config for the command line (seed 000's serving path): a JSON object whose one
// known key is "tensor_replacement":
//   {"tensor_replacement": {"tensors_path": "ref.safetensors",      // a captures file (required)
//                           "prompt_token_ids_path": "ids.json",    // optional: else the file's own
//                           "on_missing_position": "error"|"zero",  // optional, default "error"
//                           "modules": ["backbone.layers.0.mixer"], // optional filter
//                           "allow_dtype_widening": false}}          // optional
// Bad JSON, an unknown key at either level and a value of the wrong type are errors naming it.
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "accuracy/replacement_session.h"
#include "model/model.h"

namespace parity::accuracy {

// Parses the option's text (an inline JSON object).
nlohmann::json parse_additional_config(const std::string& text);
// The replacement part, or nothing when the config has no "tensor_replacement" key.
std::optional<ReplacementConfig> replacement_config_from_json(const nlohmann::json& additional);
// Both steps plus the session; nullptr when the config asks for no replacement.
std::unique_ptr<ReplacementSession> make_replacement_from_additional_config(const nlohmann::json& additional,
                                                                            const model::Model& model);

}  // namespace parity::accuracy
