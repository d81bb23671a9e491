#include "accuracy/compare_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace parity::accuracy {

std::string format_error(double v) {
  if (v == 0.0) return "0";
  if (std::isinf(v)) return "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string row_label(int prompt, int64_t position) {
  if (prompt < 0) return "-";
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive) on "p" + to_string(…).
  std::string s = "p";
  s += std::to_string(prompt);
  s += ':';
  s += std::to_string(position);
  return s;
}

std::string compare_table(const CompareResult& r) {
  std::size_t w = 6;
  for (const auto& m : r.modules) w = std::max(w, m.name.size());
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-*s %6s %8s %10s %10s %12s %8s\n", static_cast<int>(w), "module", "cols", "rows",
                "max abs", "max rel", "worst at", "parting");
  out += line;
  for (const auto& m : r.modules) {
    const std::string at = row_label(m.worst_prompt, m.worst_position);
    std::snprintf(line, sizeof line, "%-*s %6lld %8lld %10s %10s %12s %8lld%s\n", static_cast<int>(w), m.name.c_str(),
                  static_cast<long long>(m.cols), static_cast<long long>(m.rows_compared), format_error(m.max_abs).c_str(),
                  format_error(m.max_rel).c_str(), at.c_str(), static_cast<long long>(m.rows_parting),
                  r.first && r.first->module == m.name ? "  <- first" : "");
    out += line;
  }
  for (const std::string& n : r.notes) out += "note: " + n + "\n";
  const std::string tol = "atol " + format_error(r.options.atol) + ", rtol " + format_error(r.options.rtol);
  if (r.first) {
    out += "first divergence: " + r.first->module + " at prompt " + std::to_string(r.first->prompt) + ", position " +
           std::to_string(r.first->position) + " (max abs " + format_error(r.first->error.max_abs) + ", max rel " +
           format_error(r.first->error.max_rel) + "; " + tol + ")\n";
  } else {
    out += "no module parts beyond " + tol + "\n";
  }
  return out;
}

nlohmann::json compare_json(const CompareResult& r, const std::string& file_a, const std::string& file_b) {
  // JSON has no infinity: an infinite error is written as null.
  auto num = [](double v) -> nlohmann::json { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::json j;
  j["a"] = file_a;
  j["b"] = file_b;
  j["atol"] = r.options.atol;
  j["rtol"] = r.options.rtol;
  j["notes"] = r.notes;
  j["modules"] = nlohmann::json::array();
  for (const auto& m : r.modules) {
    nlohmann::json e;
    e["name"] = m.name;
    e["cols"] = m.cols;
    e["rows_compared"] = m.rows_compared;
    e["rows_parting"] = m.rows_parting;
    e["max_abs"] = num(m.max_abs);
    e["max_rel"] = num(m.max_rel);
    e["worst"] = m.worst_prompt < 0 ? nlohmann::json(nullptr)
                                    : nlohmann::json{{"prompt", m.worst_prompt}, {"position", m.worst_position}};
    e["first_parting"] = m.first_prompt < 0 ? nlohmann::json(nullptr)
                                            : nlohmann::json{{"prompt", m.first_prompt}, {"position", m.first_position}};
    nlohmann::json per = nlohmann::json::array();
    for (const auto& rows : m.rows) {
      nlohmann::json abs = nlohmann::json::array(), rel = nlohmann::json::array();
      for (const RowError& x : rows) abs.push_back(num(x.max_abs)), rel.push_back(num(x.max_rel));
      per.push_back({{"max_abs", abs}, {"max_rel", rel}});
    }
    e["per_prompt"] = per;
    j["modules"].push_back(e);
  }
  j["first_divergence"] = r.first ? nlohmann::json{{"module", r.first->module},
                                                   {"prompt", r.first->prompt},
                                                   {"position", r.first->position},
                                                   {"max_abs", num(r.first->error.max_abs)},
                                                   {"max_rel", num(r.first->error.max_rel)}}
                                  : nlohmann::json(nullptr);
  return j;
}

}  // namespace parity::accuracy
