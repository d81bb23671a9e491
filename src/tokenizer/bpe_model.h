#pragma once
// tokenizer.json "model" of type BPE: the vocabulary, the ranked merges (as "a b" strings or
// ["a", "b"] pairs) and the merge loop of Hugging Face tokenizers (lowest rank first, leftmost
// first among equal ranks, with its exact stale-entry rule), run with a heap so a long word costs
// O(n log n). Words are cached. unk_token / fuse_unk / ignore_merges are honoured; dropout,
// byte_fallback, continuing_subword_prefix and end_of_word_suffix are refused.
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace parity::tokenizer {

class BpeModel {
 public:
  static std::unique_ptr<BpeModel> from_json(const nlohmann::json& j);
  // Built in code (the built-in tokenizer): merges are pairs of existing tokens, in rank order.
  BpeModel(std::unordered_map<std::string, int32_t> vocab, const std::vector<std::pair<std::string, std::string>>& merges);

  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  const std::string* id_to_token(int32_t id) const;
  int32_t max_id() const { return max_id_; }
  std::size_t size() const { return vocab_.size(); }

 private:
  BpeModel() = default;
  void build(const std::vector<std::pair<std::string, std::string>>& merges);
  std::vector<int32_t> merge_word(std::string_view word) const;

  struct Merge {
    int32_t rank, new_id;
  };
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<int32_t, std::string> vocab_r_;
  std::unordered_map<uint64_t, Merge> merges_;  // key: (left id << 32) | right id
  std::optional<int32_t> unk_id_;
  bool fuse_unk_ = false, ignore_merges_ = false;
  int32_t max_id_ = -1;

  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace parity::tokenizer
