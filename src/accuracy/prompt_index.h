#pragma once
// Which reference prompt a live request belongs to. Seed 000's rule: hash the request's tokens at
// every stored prompt length, verify the tokens themselves, longest match wins. A retry that
// extends a prompt with reference tokens still maps to that prompt. The one case prefix matching
// gets wrong (a retry of a short prompt whose new tokens complete a longer stored prompt) is
// removed by binding the request explicitly.
#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

namespace parity::accuracy {

class PromptIndex {
 public:
  PromptIndex() = default;
  // An empty token list leaves that prompt reachable by explicit binding only.
  explicit PromptIndex(std::vector<std::vector<int32_t>> prompts);

  std::size_t num_prompts() const { return prompts_.size(); }
  const std::vector<int32_t>& prompt(std::size_t i) const { return prompts_.at(i); }

  // The prompt whose tokens are the longest verified prefix of `tokens`. Throws parity::Error
  // when no prompt ids were given, when nothing matches, or when two identical stored prompts
  // tie (bind explicitly then).
  int match(const std::vector<int32_t>& tokens) const;

  // Request bookkeeping. register_request keeps an existing entry (a preempted request resumes
  // under the same id); bind_request overrides it; forget_request drops it (the request ended).
  int register_request(uint64_t request, const std::vector<int32_t>& tokens);
  void bind_request(uint64_t request, int prompt);
  void forget_request(uint64_t request) { requests_.erase(request); }
  std::size_t num_requests() const { return requests_.size(); }  // live bindings
  // Throws parity::Error for a request that was never registered or bound.
  int resolve(uint64_t request) const;
  bool known(uint64_t request) const { return requests_.count(request) != 0; }

 private:
  std::vector<std::vector<int32_t>> prompts_;
  std::set<std::size_t> lengths_;                                     // distinct non-zero lengths
  std::map<std::pair<std::size_t, uint64_t>, std::vector<int>> by_hash_;  // (length, XXH3) → prompts
  std::map<uint64_t, int> requests_;
};

}  // namespace parity::accuracy
