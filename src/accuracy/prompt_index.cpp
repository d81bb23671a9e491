#include "accuracy/prompt_index.h"

#include <algorithm>
#include <memory>
#include <string>

#include <xxhash.h>

#include "common/error.h"

namespace parity::accuracy {

namespace {

std::string head(const std::vector<int32_t>& t, std::size_t n = 8) {
  std::string s = "[";
  for (std::size_t i = 0; i < std::min(n, t.size()); ++i) s += (i ? ", " : "") + std::to_string(t[i]);
  if (t.size() > n) s += ", …";
  return s + "] (" + std::to_string(t.size()) + " tokens)";
}

uint64_t hash_tokens(const int32_t* t, std::size_t n) { return XXH3_64bits(t, n * sizeof(int32_t)); }

}  // namespace

PromptIndex::PromptIndex(std::vector<std::vector<int32_t>> prompts) : prompts_(std::move(prompts)) {
  for (std::size_t i = 0; i < prompts_.size(); ++i) {
    const auto& p = prompts_[i];
    if (p.empty()) continue;
    lengths_.insert(p.size());
    by_hash_[{p.size(), hash_tokens(p.data(), p.size())}].push_back(static_cast<int>(i));
  }
}

int PromptIndex::match(const std::vector<int32_t>& tokens) const {
  if (lengths_.empty())
    throw Error("tensor replacement: cannot match a request to a reference prompt: no prompt_token_ids were given "
                "(give them, or bind the request to a prompt explicitly)");
  // One streaming pass: the digest at each stored length equals the one-shot hash of that prefix.
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> st(XXH3_createState(), &XXH3_freeState);
  if (!st || XXH3_64bits_reset(st.get()) != XXH_OK) throw Error("tensor replacement: xxHash state allocation failed");
  std::size_t fed = 0, tried = 0;
  int best = -1;
  for (std::size_t len : lengths_) {
    if (len > tokens.size()) break;
    XXH3_64bits_update(st.get(), tokens.data() + fed, (len - fed) * sizeof(int32_t));
    fed = len;
    ++tried;
    auto it = by_hash_.find({len, XXH3_64bits_digest(st.get())});
    if (it == by_hash_.end()) continue;
    std::vector<int> hits;
    for (int p : it->second)
      if (std::equal(prompts_[p].begin(), prompts_[p].end(), tokens.begin())) hits.push_back(p);
    if (hits.empty()) continue;  // a hash collision, not a match
    if (hits.size() > 1)
      throw Error("tensor replacement: reference prompts " + std::to_string(hits[0]) + " and " +
                  std::to_string(hits[1]) + " have identical tokens " + head(prompts_[hits[0]]) +
                  "; prefix matching cannot tell them apart: bind the request explicitly");
    best = hits[0];
  }
  if (best < 0)
    throw Error("tensor replacement: no reference prompt is a prefix of the request's tokens " + head(tokens) +
                " (tried " + std::to_string(tried) + " prefix length" + (tried == 1 ? "" : "s") + ")");
  return best;
}

int PromptIndex::register_request(uint64_t request, const std::vector<int32_t>& tokens) {
  auto it = requests_.find(request);
  if (it != requests_.end()) return it->second;
  const int p = match(tokens);
  requests_[request] = p;
  return p;
}

void PromptIndex::bind_request(uint64_t request, int prompt) {
  if (prompt < 0 || static_cast<std::size_t>(prompt) >= prompts_.size())
    throw Error("tensor replacement: request " + std::to_string(request) + " is bound to reference prompt " +
                std::to_string(prompt) + " but the reference has " + std::to_string(prompts_.size()) + " prompt" +
                (prompts_.size() == 1 ? "" : "s"));
  requests_[request] = prompt;
}

int PromptIndex::resolve(uint64_t request) const {
  auto it = requests_.find(request);
  if (it == requests_.end())
    throw Error("tensor replacement: request " + std::to_string(request) +
                " was never registered (register it with its prompt tokens or bind it to a reference prompt first)");
  return it->second;
}

}  // namespace parity::accuracy
