#include "engine/speculation/ngram_drafter.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace parity::engine {

NgramDrafter::NgramDrafter(int min_n, int max_n) : min_n_(min_n), max_n_(max_n) {
  if (min_n < 1 || max_n < min_n)
    throw Error("speculative decoding: the n-gram sizes must satisfy 1 <= min <= max (got " + std::to_string(min_n) +
                ", " + std::to_string(max_n) + ")");
}

std::vector<int32_t> NgramDrafter::lookup(const std::vector<int32_t>& t, int room) const {
  const int64_t T = static_cast<int64_t>(t.size());
  if (room < 1) return {};
  for (int64_t n = std::min<int64_t>(max_n_, T - 1); n >= min_n_; --n) {
    const int32_t* pat = t.data() + (T - n);
    // The latest earlier occurrence whose continuation lies inside the stream.
    for (int64_t i = T - n - 1; i >= 0; --i) {
      if (!std::equal(pat, pat + n, t.data() + i)) continue;
      const int64_t from = i + n, to = std::min<int64_t>(T, from + room);
      return std::vector<int32_t>(t.begin() + from, t.begin() + to);
    }
  }
  return {};
}

void NgramDrafter::propose(std::vector<DraftQuery>& queries) {
  for (DraftQuery& q : queries) q.drafts = lookup(*q.tokens, q.room);
}

}  // namespace parity::engine
