#include "accuracy/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "accuracy/module_order.h"
#include "common/error.h"

namespace parity::accuracy {
namespace {

RowError row_error(const float* a, const float* b, int64_t n, const CompareOptions& opt) {
  double worst = 0.0, scale = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = a[i], y = b[i];
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    if (std::isfinite(y)) scale = std::max(scale, std::fabs(y));
    if (x == y || (std::isnan(x) && std::isnan(y))) continue;
    double d = std::fabs(x - y);
    if (!std::isfinite(d)) d = std::numeric_limits<double>::infinity();
    worst = std::max(worst, d);
  }
  RowError e;
  e.max_abs = worst;
  e.max_rel = worst == 0.0 ? 0.0 : scale > 0.0 ? worst / scale : std::numeric_limits<double>::infinity();
  e.parts = worst > opt.atol + opt.rtol * scale;
  return e;
}

std::string first_token_difference(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  const std::size_t n = std::min(a.size(), b.size());
  for (std::size_t i = 0; i < n; ++i)
    if (a[i] != b[i])
      return "first difference at index " + std::to_string(i) + " (A " + std::to_string(a[i]) + ", B " +
             std::to_string(b[i]) + ")";
  return "A has " + std::to_string(a.size()) + " tokens, B " + std::to_string(b.size());
}

}  // namespace

CompareResult compare_captures(const Captures& a, const Captures& b, const CompareOptions& opt) {
  if (a.prompts.size() != b.prompts.size())
    throw Error("the files hold different prompts: A has " + std::to_string(a.prompts.size()) + " prompt(s), B has " +
                std::to_string(b.prompts.size()));
  for (std::size_t i = 0; i < a.prompts.size(); ++i)
    if (a.prompts[i].prompt_token_ids != b.prompts[i].prompt_token_ids)
      throw Error("prompt " + std::to_string(i) + " differs between the files: " +
                  first_token_difference(a.prompts[i].prompt_token_ids, b.prompts[i].prompt_token_ids));

  CompareResult res;
  res.options = opt;
  const std::vector<std::string> ma = captured_modules(a), mb = captured_modules(b);
  const std::set<std::string> sa(ma.begin(), ma.end()), sb(mb.begin(), mb.end());
  std::vector<std::string> common;
  for (const std::string& m : ma) {
    if (sb.count(m)) common.push_back(m);
    else res.notes.push_back(m + ": only in A, not compared");
  }
  for (const std::string& m : mb)
    if (!sa.count(m)) res.notes.push_back(m + ": only in B, not compared");
  if (common.empty()) throw Error("the files have no module in common (A: " + std::to_string(ma.size()) +
                                  " modules, B: " + std::to_string(mb.size()) + ")");

  std::vector<std::map<std::string, Matrix>> fa, fb;
  for (const PromptCapture& p : a.prompts) fa.push_back(flatten(p));
  for (const PromptCapture& p : b.prompts) fb.push_back(flatten(p));

  // Positions beyond where the fed tokens part compare different inputs, not numerics.
  std::vector<int64_t> limit(a.prompts.size(), std::numeric_limits<int64_t>::max());
  for (std::size_t i = 0; i < a.prompts.size(); ++i) {
    const auto& ca = a.prompts[i].continuation_token_ids;
    const auto& cb = b.prompts[i].continuation_token_ids;
    const std::size_t n = std::min(ca.size(), cb.size());
    for (std::size_t k = 0; k < n; ++k)
      if (ca[k] != cb[k]) {
        limit[i] = static_cast<int64_t>(a.prompts[i].prompt_token_ids.size() + k);
        res.notes.push_back("prompt " + std::to_string(i) + ": the continuations part at position " +
                            std::to_string(limit[i]) + " (A fed " + std::to_string(ca[k]) + ", B fed " +
                            std::to_string(cb[k]) + "); positions from there on are not compared");
        break;
      }
  }

  for (const std::string& m : common) {
    ModuleComparison mc;
    mc.name = m;
    mc.rows.resize(a.prompts.size());
    for (std::size_t i = 0; i < a.prompts.size(); ++i) {
      const Matrix& x = fa[i].at(m);
      const Matrix& y = fb[i].at(m);
      if (x.cols != y.cols)
        throw Error("module " + m + " has different shapes: A [" + std::to_string(x.rows) + ", " + std::to_string(x.cols) +
                    "], B [" + std::to_string(y.rows) + ", " + std::to_string(y.cols) + "] (feature sizes differ)");
      mc.cols = x.cols;
      const int64_t n = std::min({x.rows, y.rows, limit[i]});
      if (x.rows != y.rows && std::min(x.rows, y.rows) < limit[i])
        res.notes.push_back("prompt " + std::to_string(i) + ": A has " + std::to_string(x.rows) + " positions, B " +
                            std::to_string(y.rows) + "; the first " + std::to_string(n) + " are compared");
      for (int64_t p = 0; p < n; ++p) {
        RowError e = row_error(x.row(p), y.row(p), x.cols, opt);
        mc.rows[i].push_back(e);
        ++mc.rows_compared;
        if (e.max_abs > mc.max_abs || (mc.worst_prompt < 0 && e.max_abs > 0)) {
          mc.max_abs = e.max_abs;
          mc.worst_prompt = static_cast<int>(i);
          mc.worst_position = p;
        }
        mc.max_rel = std::max(mc.max_rel, e.max_rel);
        if (e.parts) {
          ++mc.rows_parting;
          if (mc.first_prompt < 0) mc.first_prompt = static_cast<int>(i), mc.first_position = p;
        }
      }
    }
    if (mc.first_prompt >= 0 && !res.first)
      res.first = Divergence{m, mc.first_prompt, mc.first_position,
                             mc.rows[static_cast<std::size_t>(mc.first_prompt)][static_cast<std::size_t>(mc.first_position)]};
    res.modules.push_back(std::move(mc));
  }
  // Row-count notes repeat for every module of a prompt; one line each is enough.
  std::vector<std::string> uniq;
  for (const std::string& s : res.notes)
    if (std::find(uniq.begin(), uniq.end(), s) == uniq.end()) uniq.push_back(s);
  res.notes = std::move(uniq);
  return res;
}

}  // namespace parity::accuracy
