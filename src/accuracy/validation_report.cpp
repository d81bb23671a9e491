#include "accuracy/validation_report.h"

#include <cmath>
#include <limits>

#include "common/format.h"

namespace parity::accuracy {

namespace {

// JSON has no infinities: an infinite |Δ| becomes the string "inf".
nlohmann::json num(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (std::isnan(v)) return nullptr;
  return v;
}

struct Worst {
  double rel = -1, max_abs = 0, bound = 0;
  int prompt = -1, token = -1;
  int64_t position = -1;
};

// Worst error per tolerance entry (by max_abs / bound, i.e. how close to failing), NaN tokens apart.
std::vector<Worst> worst_of(const ValidationReport& r, const std::vector<const PromptValidation*>& ps) {
  std::vector<Worst> w(r.tol_map.size());
  for (const PromptValidation* p : ps)
    for (const TokenCheck& t : p->tokens)
      for (std::size_t e = 0; e < t.errors.size() && e < w.size(); ++e) {
        const TopkError& x = t.errors[e];
        const double ratio = x.bound > 0 ? x.max_abs / x.bound : (x.max_abs > 0 ? INFINITY : 0.0);
        const double have = w[e].bound > 0 ? w[e].max_abs / w[e].bound : (w[e].max_abs > 0 ? INFINITY : 0.0);
        if (w[e].token < 0 || ratio > have) w[e] = {x.rel(), x.max_abs, x.bound, p->prompt_index, t.index, t.position};
      }
  return w;
}

nlohmann::json worst_json(const ValidationReport& r, const std::vector<Worst>& w) {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t e = 0; e < w.size(); ++e) {
    if (w[e].token < 0) continue;
    j[tol_key(r.tol_map[e].k)] = {{"max_abs", num(w[e].max_abs)}, {"rel", num(w[e].rel)},
                                  {"bound", num(w[e].bound)},     {"prompt", w[e].prompt},
                                  {"token_index", w[e].token},    {"position", w[e].position}};
  }
  return j;
}

nlohmann::json token_json(const TokenCheck& t) {
  nlohmann::json j = {{"index", t.index},       {"position", t.position},
                      {"run", t.run},           {"expected", t.expected},
                      {"actual", t.actual},     {"status", token_status_name(t.status)},
                      {"passed", t.passed()}};
  nlohmann::json errs = nlohmann::json::object();
  for (const TopkError& e : t.errors)
    errs[tol_key(e.k)] = {{"max_abs", num(e.max_abs)}, {"rel", num(e.rel())},       {"bound", num(e.bound)},
                          {"scale", num(e.scale)},     {"worst_token", e.worst_token}, {"passed", e.passed}};
  j["errors"] = errs;
  if (t.actual != t.expected && t.status != TokenStatus::NaN) {
    j["reference_gap"] = num(t.reference_gap);
    j["divergence_difference"] = num(t.divergence_difference);
  }
  if (!t.nan_in.empty()) j["nan_in"] = t.nan_in;
  return j;
}

std::string label(int k) { return k == 0 ? "all" : "top-" + std::to_string(k); }

}  // namespace

nlohmann::json validation_to_json(const ValidationReport& r) {
  nlohmann::json j;
  j["passed"] = r.passed();
  j["tol_map"] = tol_map_to_json(r.tol_map);
  j["divergence_tol"] = r.divergence_tol;
  int tokens = 0, failed = 0, div = 0, ok_div = 0, nans = 0;
  std::vector<const PromptValidation*> all;
  nlohmann::json prompts = nlohmann::json::array();
  for (const PromptValidation& p : r.prompts) {
    all.push_back(&p);
    nlohmann::json pj = {{"index", p.prompt_index},
                         {"prompt_len", p.prompt_len},
                         {"tokens_checked", p.tokens.size()},
                         {"runs", p.runs},
                         {"retries", p.runs > 0 ? p.runs - 1 : 0},
                         {"passed", p.passed()},
                         {"expected_tokens", p.expected_tokens}};
    const int ff = p.first_failure();
    pj["first_failure"] = ff < 0 ? nlohmann::json(nullptr) : nlohmann::json(p.tokens[ff].index);
    nlohmann::json tj = nlohmann::json::array();
    for (const TokenCheck& t : p.tokens) {
      ++tokens;
      failed += !t.passed();
      div += t.actual != t.expected && t.status != TokenStatus::NaN;
      ok_div += t.status == TokenStatus::AcceptableDivergence || t.status == TokenStatus::AcceptableDivergenceTopkErrors;
      nans += t.status == TokenStatus::NaN;
      tj.push_back(token_json(t));
    }
    pj["tokens"] = tj;
    pj["worst"] = worst_json(r, worst_of(r, {&p}));
    prompts.push_back(pj);
  }
  j["summary"] = {{"prompts", r.prompts.size()}, {"tokens", tokens},       {"failed_tokens", failed},
                  {"divergences", div},          {"acceptable_divergences", ok_div}, {"nan_tokens", nans},
                  {"worst", worst_json(r, worst_of(r, all))}};
  j["prompts"] = prompts;
  return j;
}

std::string validation_summary(const ValidationReport& r) {
  std::string s;
  int tokens = 0, failed = 0;
  for (const PromptValidation& p : r.prompts) {
    const int ff = p.first_failure();
    s += "prompt " + std::to_string(p.prompt_index) + ": " + std::to_string(p.prompt_len) + " prompt tokens, " +
         std::to_string(p.tokens.size()) + " checked in " + std::to_string(p.runs) + " run(s): " +
         (ff < 0 ? "PASSED" : "FAILED at token " + std::to_string(p.tokens[ff].index) + " (position " +
                                   std::to_string(p.tokens[ff].position) + ")") +
         "\n";
    char h[160];
    std::snprintf(h, sizeof h, "  %5s  %8s  %3s  %8s  %6s  %-33s", "token", "position", "run", "expected", "actual",
                  "status");
    s += h;
    for (const auto& e : r.tol_map) {
      std::snprintf(h, sizeof h, "  %-19s", (label(e.k) + " err/bound").c_str());
      s += h;
    }
    s += "\n";
    for (const TokenCheck& t : p.tokens) {
      ++tokens;
      failed += !t.passed();
      char b[160];
      std::snprintf(b, sizeof b, "  %5d  %8lld  %3d  %8d  %6d  %-33s", t.index, static_cast<long long>(t.position), t.run,
                    t.expected, t.actual, token_status_name(t.status));
      s += b;
      for (const TopkError& e : t.errors) s += format_number("  %9.2e/", e.max_abs) + format_number("%-8.2e", e.bound) + (e.passed ? " " : "!");
      if (t.status == TokenStatus::NaN) s += "  NaN in " + t.nan_in;
      else if (t.actual != t.expected) s += format_number("  ref gap %.3g", t.reference_gap);
      s += "\n";
    }
    auto w = worst_of(r, {&p});
    for (std::size_t e = 0; e < w.size(); ++e)
      if (w[e].token >= 0)
        s += "  worst " + label(r.tol_map[e].k) + ": |Δ| " + format_number("%.3e", w[e].max_abs) + " (rel " +
             format_number("%.3e", w[e].rel) + ", bound " + format_number("%.3e", w[e].bound) + ") at token " +
             std::to_string(w[e].token) + ", position " + std::to_string(w[e].position) + "\n";
  }
  s += std::string(r.passed() ? "PASSED" : "FAILED") + ": " + std::to_string(tokens - failed) + " of " +
       std::to_string(tokens) + " tokens within tolerance over " + std::to_string(r.prompts.size()) + " prompt(s)\n";
  return s;
}

}  // namespace parity::accuracy
