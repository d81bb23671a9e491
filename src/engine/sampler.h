#pragma once
// Token choice from one logit row. Each draw uses a counter-based random number derived from
// (request seed, index of the generated token) only, so the same seed gives the same tokens
// whatever else shares the batch, however the request was scheduled or preempted.
#include <cstdint>
#include <vector>

#include "engine/request.h"

namespace parity::engine {

// Greedy when temperature == 0 (ties go to the lowest id). Otherwise softmax(logits / T),
// top-k, then top-p (smallest prefix of the sorted distribution reaching p), then one draw.
int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, int64_t draw_index);

// log_softmax(logits)[token] for `token`, plus the top-n entries (descending, ties by id).
std::vector<TokenLogprob> top_logprobs(const float* logits, int vocab, int n, int32_t chosen);

// The uniform in [0, 1) used for draw `index` of a request with `seed`.
double draw_uniform(uint64_t seed, int64_t index);

}  // namespace parity::engine
