#include "accuracy/logit_tolerance.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "common/error.h"

namespace parity::accuracy {

TolMap default_tol_map() { return {{5, 1e-5, 0.01}, {50, 1e-5, 0.02}, {1000, 1e-5, 0.03}, {0, 1e-5, 0.05}}; }

std::string tol_key(int k) { return k == 0 ? "all" : std::to_string(k); }

TolMap parse_tol_map(const nlohmann::json& j) {
  if (!j.is_object() || j.empty())
    throw Error("--tol-map: expected a non-empty JSON object such as {\"5\": [1e-5, 0.01], \"all\": [1e-5, 0.05]}");
  TolMap m;
  for (const auto& [key, v] : j.items()) {
    TolEntry e;
    if (key != "all") {
      std::size_t used = 0;
      int k = 0;
      try {
        k = std::stoi(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || k < 1) throw Error("--tol-map: key \"" + key + "\" is neither a positive k nor \"all\"");
      e.k = k;
    }
    if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number())
      throw Error("--tol-map: \"" + key + "\" must map to [atol, rtol], not " + v.dump());
    e.atol = v[0].get<double>();
    e.rtol = v[1].get<double>();
    if (!(e.atol >= 0) || !(e.rtol >= 0)) throw Error("--tol-map: \"" + key + "\" has a negative tolerance");
    m.push_back(e);
  }
  std::sort(m.begin(), m.end(), [](const TolEntry& a, const TolEntry& b) {
    return (a.k == 0 ? INT32_MAX : a.k) < (b.k == 0 ? INT32_MAX : b.k);
  });
  for (std::size_t i = 1; i < m.size(); ++i)
    if (m[i].k == m[i - 1].k) throw Error("--tol-map: k = " + tol_key(m[i].k) + " is given twice");
  return m;
}

nlohmann::json tol_map_to_json(const TolMap& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& e : m) j[tol_key(e.k)] = {e.atol, e.rtol};
  return j;
}

const char* token_status_name(TokenStatus s) {
  switch (s) {
    case TokenStatus::Matched: return "MATCHED";
    case TokenStatus::TopkErrors: return "TOPK_ERRORS";
    case TokenStatus::AcceptableDivergence: return "ACCEPTABLE_DIVERGENCE";
    case TokenStatus::AcceptableDivergenceTopkErrors: return "ACCEPTABLE_DIVERGENCE+TOPK_ERRORS";
    case TokenStatus::Diverged: return "DIVERGED";
    case TokenStatus::DivergedTopkErrors: return "DIVERGED+TOPK_ERRORS";
    case TokenStatus::NaN: return "NAN";
  }
  return "?";
}

int32_t argmax_logit(const float* row, int n) {
  int32_t best = -1;
  for (int i = 0; i < n; ++i)
    if (!std::isnan(row[i]) && (best < 0 || row[i] > row[best])) best = i;
  return best < 0 ? 0 : best;
}

TokenCheck check_token_logits(const float* ours, const float* ref, int vocab, int32_t actual_token,
                              int32_t expected_token, const TolMap& tol, double divergence_tol) {
  if (vocab < 1) throw Error("logit validation: empty logit row");
  for (int32_t t : {actual_token, expected_token})
    if (t < 0 || t >= vocab)
      throw Error("logit validation: token " + std::to_string(t) + " is outside the vocabulary [0, " +
                  std::to_string(vocab) + ")");
  TokenCheck c;
  c.actual = actual_token;
  c.expected = expected_token;
  bool nan_ours = false, nan_ref = false;
  for (int i = 0; i < vocab; ++i) {
    nan_ours = nan_ours || std::isnan(ours[i]);
    nan_ref = nan_ref || std::isnan(ref[i]);
  }
  if (nan_ours || nan_ref) {
    c.status = TokenStatus::NaN;
    c.nan_in = nan_ours && nan_ref ? "both" : nan_ours ? "ours" : "reference";
    return c;
  }
  std::vector<int32_t> order(static_cast<std::size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  int widest = 0;
  for (const auto& e : tol) widest = e.k == 0 ? vocab : std::max(widest, std::min(e.k, vocab));
  std::partial_sort(order.begin(), order.begin() + widest, order.end(),
                    [&](int32_t a, int32_t b) { return ref[a] > ref[b] || (ref[a] == ref[b] && a < b); });
  bool topk_ok = true;
  for (const auto& e : tol) {
    TopkError err;
    err.k = e.k;
    const int n = e.k == 0 ? vocab : std::min(e.k, vocab);
    for (int j = 0; j < n; ++j) {
      const int32_t i = order[static_cast<std::size_t>(j)];
      const double a = ours[i], r = ref[i];
      const double d = a == r ? 0.0 : std::fabs(a - r);
      if (d > err.max_abs || err.worst_token < 0) {
        err.max_abs = d;
        err.worst_token = i;
      }
      if (std::isfinite(r)) err.scale = std::max(err.scale, std::fabs(r));
    }
    err.bound = e.atol + e.rtol * err.scale;
    err.passed = err.max_abs <= err.bound;
    topk_ok = topk_ok && err.passed;
    c.errors.push_back(err);
  }
  if (c.actual == c.expected) {
    c.status = topk_ok ? TokenStatus::Matched : TokenStatus::TopkErrors;
    return c;
  }
  c.reference_gap = static_cast<double>(ref[c.expected]) - ref[c.actual];
  c.divergence_difference = static_cast<double>(ours[c.actual]) - ours[c.expected];
  const bool acceptable = c.reference_gap <= divergence_tol;
  if (acceptable) c.status = topk_ok ? TokenStatus::AcceptableDivergence : TokenStatus::AcceptableDivergenceTopkErrors;
  else c.status = topk_ok ? TokenStatus::Diverged : TokenStatus::DivergedTopkErrors;
  return c;
}

}  // namespace parity::accuracy
