#pragma once
// The two faces of a validation result: JSON for tools (`validate --json`) and a table for people.
#include <string>

#include <nlohmann/json.hpp>

#include "accuracy/logit_validation.h"

namespace parity::accuracy {

// {"passed", "tol_map", "divergence_tol", "summary": {...}, "prompts": [{..., "tokens": [...]}]};
// docs/accuracy.md lists every field.
nlohmann::json validation_to_json(const ValidationReport& r);
// One line per checked token, then per prompt and overall the worst error per k and where.
std::string validation_summary(const ValidationReport& r);

}  // namespace parity::accuracy
