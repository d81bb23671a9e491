#pragma once
// Prompt lookup (vLLM's `ngram` method): the last n tokens of the stream, for n from max_n down to
// min_n, are looked up earlier in the stream; the tokens that followed their latest earlier
// occurrence are the drafts. Needs no second model; hits on repetitive text (code, quoting the
// prompt, loops).
#include "engine/speculation/drafter.h"

namespace parity::engine {

class NgramDrafter : public Drafter {
 public:
  // 1 <= min_n <= max_n; throws parity::Error otherwise.
  NgramDrafter(int min_n, int max_n);
  void propose(std::vector<DraftQuery>& queries) override;
  const char* name() const override { return "ngram"; }

  // The drafts for one stream (exposed for tests).
  std::vector<int32_t> lookup(const std::vector<int32_t>& tokens, int room) const;

 private:
  int min_n_, max_n_;
};

}  // namespace parity::engine
