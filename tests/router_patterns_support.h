#pragma once
// Helpers for the router-pattern and forced-routing tests: models loaded once per (checkpoint,
// MoE routing pattern) through test::cached_model, whole-stream logits through the engine, and the
// relative error measure.
#include <cmath>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "io/safetensors.h"
#include "io/token_file.h"
#include "model/model.h"
#include "test_support.h"

namespace parity::test {

inline const std::string kGraniteFixture = std::string(PARITY_TEST_DATA) + "/granite_hybrid";

// The fixture's token stream (its reference logits and router captures are of these tokens).
inline std::vector<int32_t> granite_fixture_tokens() { return io::read_tokens(kGraniteFixture + "/tokens.json"); }

// spec: builtin:NAME or a folder path; cached_model with the routing pattern.
inline const model::Model& routed_model(const std::string& spec, model::MoeRoutingPattern p) {
  model::ModelOptions o;
  o.moe_routing = p;
  return cached_model(spec, o);
}

inline constexpr model::MoeRoutingPattern kPatterns[] = {model::MoeRoutingPattern::Direct,
                                                         model::MoeRoutingPattern::Fused};

// Relative Frobenius error ‖got − ref‖ / ‖ref‖, in double.
inline double rel_fro(const float* got, const float* ref, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(num / den);
}

// Every row (positions 0 … P+K−1) of prompt + teacher-forced continuation through the engine
// under `cfg`; `attach` sets hooks on the engine before the request is added.
template <class Attach>
std::vector<float> engine_rows(const model::Model& m, const std::vector<int32_t>& stream, std::size_t prompt_len,
                               engine::EngineConfig cfg, Attach&& attach) {
  engine::Engine eng(m, cfg);
  attach(eng);
  const uint64_t id = eng.add_request(teacher_forced_all_rows(stream, static_cast<int>(prompt_len)));
  auto res = eng.run_to_completion();
  std::vector<float> out;
  for (const auto& r : res.at(id).logit_rows) out.insert(out.end(), r.begin(), r.end());
  return out;
}

}  // namespace parity::test
