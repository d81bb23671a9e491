#pragma once
// One generated token's logits against the reference's (NxDI check_accuracy_logits semantics,
// defined precisely here; docs/accuracy.md "Logit validation" says the same in prose).
//
// For each entry (k, atol, rtol) of the tolerance map, S_k is the reference's k highest logits'
// token ids (ties: lower id first; k = 0 means "all"). Then
//   max_abs_k = max_{i∈S_k} |ours_i − ref_i|,  scale_k = max_{i∈S_k} |ref_i|,
//   bound_k   = atol + rtol · scale_k,          passed_k ⟺ max_abs_k ≤ bound_k.
// The relative term uses the largest reference logit of the set rather than each element's own,
// so a logit near zero is held to the same bound as its neighbours. Equal infinities count as
// equal; any other infinity makes Δ infinite.
// Divergence: our greedy token differs from the reference's token (the one it fed next; for a
// greedy reference its argmax). It is acceptable when reference_gap = ref[expected] − ref[ours]
// ≤ divergence_tol, i.e. the reference itself nearly chose our token (when ours is its
// runner-up: its top-2 logits are within divergence_tol).
// A NaN in either row fails the token before anything is compared.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::accuracy {

struct TolEntry {
  int k = 0;  // 0 = all logits
  double atol = 0, rtol = 0;
};
using TolMap = std::vector<TolEntry>;  // ascending k, "all" last

TolMap default_tol_map();  // top-5 (1e-5, 0.01), top-50 (1e-5, 0.02), top-1000 (1e-5, 0.03), all (1e-5, 0.05)
// {"5": [atol, rtol], "all": [atol, rtol], ...}; throws parity::Error naming a bad entry.
TolMap parse_tol_map(const nlohmann::json& j);
nlohmann::json tol_map_to_json(const TolMap& m);
std::string tol_key(int k);  // "5", "all"

enum class TokenStatus {
  Matched,
  TopkErrors,
  AcceptableDivergence,
  AcceptableDivergenceTopkErrors,
  Diverged,
  DivergedTopkErrors,
  NaN,
};
const char* token_status_name(TokenStatus s);
inline bool token_passed(TokenStatus s) { return s == TokenStatus::Matched || s == TokenStatus::AcceptableDivergence; }

struct TopkError {
  int k = 0;
  double max_abs = 0, scale = 0, bound = 0;
  int32_t worst_token = -1;  // token id with the largest |Δ|
  bool passed = true;
  double rel() const { return scale > 0 ? max_abs / scale : max_abs; }
};

struct TokenCheck {
  int index = 0;         // generated-token index (0 = the token after the prompt)
  int64_t position = 0;  // absolute position of the logit row (index + prompt_len − 1)
  int run = 0;           // which generation run produced it (0 = first, then one per retry)
  int32_t expected = -1, actual = -1;
  TokenStatus status = TokenStatus::Matched;
  std::vector<TopkError> errors;
  double reference_gap = 0;          // ref[expected] − ref[actual]; 0 without divergence
  double divergence_difference = 0;  // ours[actual] − ours[expected] (NxDI's measure)
  std::string nan_in;                // "ours", "reference" or "both" for a NaN token
  bool passed() const { return token_passed(status); }
};

// Index of the largest value, ignoring NaN (lowest index on ties; 0 for an all-NaN row).
int32_t argmax_logit(const float* row, int n);

TokenCheck check_token_logits(const float* ours, const float* ref, int vocab, int32_t actual_token,
                              int32_t expected_token, const TolMap& tol, double divergence_tol);

}  // namespace parity::accuracy
