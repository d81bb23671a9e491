#pragma once
// Speculative decoding's proposers (docs/speculative-decoding.md). A drafter guesses up to `room`
// tokens that follow a request's stream; the target model then verifies them in one pass of
// room + 1 rows, and a draft token is accepted when it equals the token the target itself draws
// there. Drafts only change how many passes a request needs, never which tokens it gets, so a
// drafter needs no numerics guarantee of its own.
#include <cstdint>
#include <vector>

namespace parity::engine {

struct DraftQuery {
  uint64_t request = 0;
  const std::vector<int32_t>* tokens = nullptr;  // the request's stream so far (prompt + generated)
  int room = 0;                                  // at most this many drafts
  std::vector<int32_t> drafts;                   // out: 0 … room tokens
};

class Drafter {
 public:
  virtual ~Drafter() = default;
  // Fills every query's drafts (one call per engine step, all requests together).
  virtual void propose(std::vector<DraftQuery>& queries) = 0;
  // The request finished or was aborted: drop what is kept for it.
  virtual void forget(uint64_t request) { (void)request; }
  virtual const char* name() const = 0;
};

}  // namespace parity::engine
