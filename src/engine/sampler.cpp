#include "engine/sampler.h"

#include <algorithm>
#include <numeric>

#include "kernels/math.h"

namespace parity::engine {

double draw_uniform(uint64_t seed, int64_t index) {
  uint64_t z = seed ^ (0x9e3779b97f4a7c15ull * static_cast<uint64_t>(index + 1));
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
}

int32_t sample_token(const float* logits, int vocab, const SamplingParams& p, int64_t draw_index) {
  int32_t best = 0;
  for (int i = 1; i < vocab; ++i)
    if (logits[i] > logits[best]) best = i;
  if (p.temperature <= 0.0f) return best;

  // Candidates sorted by logit (descending, ties by id): deterministic whatever the input order.
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  int keep = vocab;
  if (p.top_k > 0) keep = std::min(keep, p.top_k);
  const float mx = logits[idx[0]];
  std::vector<double> prob(keep);
  double sum = 0.0;
  for (int i = 0; i < keep; ++i) {
    prob[i] = kernels::exp_f((logits[idx[i]] - mx) / p.temperature);
    sum += prob[i];
  }
  if (p.top_p < 1.0f) {
    double acc = 0.0;
    int cut = keep;
    for (int i = 0; i < keep; ++i) {
      acc += prob[i] / sum;
      if (acc >= p.top_p) {
        cut = i + 1;
        break;
      }
    }
    keep = cut;
    sum = 0.0;
    for (int i = 0; i < keep; ++i) sum += prob[i];
  }
  const double u = draw_uniform(p.seed, draw_index) * sum;
  double acc = 0.0;
  for (int i = 0; i < keep; ++i) {
    acc += prob[i];
    if (u < acc) return idx[i];
  }
  return idx[keep - 1];
}

std::vector<TokenLogprob> top_logprobs(const float* logits, int vocab, int n, int32_t chosen) {
  float mx = logits[0];
  for (int i = 1; i < vocab; ++i) mx = std::max(mx, logits[i]);
  float sum = 0.0f;  // one sequential order: the result depends on the row only
  for (int i = 0; i < vocab; ++i) sum += kernels::exp_f(logits[i] - mx);
  const float lse = mx + kernels::log_f(sum);
  std::vector<TokenLogprob> out;
  out.push_back({chosen, logits[chosen] - lse});
  if (n > 0) {
    std::vector<int32_t> idx(vocab);
    std::iota(idx.begin(), idx.end(), 0);
    n = std::min(n, vocab);
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < n; ++i) out.push_back({idx[i], logits[idx[i]] - lse});
  }
  return out;
}

}  // namespace parity::engine
