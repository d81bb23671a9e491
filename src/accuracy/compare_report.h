#pragma once
// The three renderings of a comparison: a terminal table, JSON (every row's errors, for scripts)
// and a self-contained HTML page (inline SVG, no external script or style).
#include <string>

#include <nlohmann/json.hpp>

#include "accuracy/compare.h"

namespace parity::accuracy {

std::string compare_table(const CompareResult& r);
nlohmann::json compare_json(const CompareResult& r, const std::string& file_a, const std::string& file_b);
std::string compare_html(const CompareResult& r, const std::string& file_a, const std::string& file_b);

// "p{prompt}:{position}", or "-" when prompt < 0.
std::string row_label(int prompt, int64_t position);

// "0" for zero, otherwise three significant digits ("1.23e-05", "inf").
std::string format_error(double v);

}  // namespace parity::accuracy
