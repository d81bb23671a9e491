#include "tokenizer/bpe_model.h"

#include <queue>

#include "common/error.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/utf8.h"

namespace parity::tokenizer {

namespace {

constexpr std::size_t kCacheableWord = 256;  // longer words are not cached (as in HF)
constexpr std::size_t kCacheEntries = 1 << 16;

uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

void refuse_set(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (it->is_string() && it->get<std::string>().empty()) return;
  if (it->is_boolean() && !it->get<bool>()) return;
  if (it->is_number() && it->get<double>() == 0.0) return;
  throw Error(std::string("unsupported BPE option \"") + key + "\": " + it->dump());
}

}  // namespace

std::unique_ptr<BpeModel> BpeModel::from_json(const nlohmann::json& j) {
  const std::string where = "model";
  if (!j.is_object()) throw Error("tokenizer.json has no \"model\" object");
  auto t = j.find("type");
  if (t != j.end() && !t->is_null()) {
    if (!t->is_string()) throw Error("model: \"type\" must be a string");
    if (t->get<std::string>() != "BPE")
      throw Error("unsupported model type '" + t->get<std::string>() + "' (parity supports BPE)");
  } else if (!j.contains("merges")) {
    throw Error("unsupported model: no \"type\" and no \"merges\" (parity supports BPE)");
  }
  refuse_set(j, "dropout");
  refuse_set(j, "byte_fallback");
  refuse_set(j, "continuing_subword_prefix");
  refuse_set(j, "end_of_word_suffix");

  std::unique_ptr<BpeModel> m(new BpeModel());
  for (const auto& [token, id] : json_fields::object_field(j, "vocab", where).items()) {
    const int32_t v = json_fields::id_value(id, "model vocab entry '" + token + "'");
    if (!m->vocab_r_.emplace(v, token).second)
      throw Error("model vocab: id " + std::to_string(v) + " is given to both '" + m->vocab_r_[v] + "' and '" + token + "'");
    m->vocab_.emplace(token, v);
    m->max_id_ = std::max(m->max_id_, v);
  }
  std::vector<std::pair<std::string, std::string>> merges;
  auto mit = j.find("merges");
  if (mit != j.end() && !mit->is_null()) {
    if (!mit->is_array()) throw Error("model: \"merges\" must be an array");
    merges.reserve(mit->size());
    for (std::size_t i = 0; i < mit->size(); ++i) {
      const nlohmann::json& e = (*mit)[i];
      const std::string at = "model merges[" + std::to_string(i) + "]";
      if (e.is_string()) {  // legacy "a b": exactly one space
        const std::string s = e.get<std::string>();
        const std::size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          throw Error(at + ": \"" + s + "\" is not two tokens separated by one space");
        merges.emplace_back(s.substr(0, sp), s.substr(sp + 1));
      } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
        merges.emplace_back(e[0].get<std::string>(), e[1].get<std::string>());
      } else {
        throw Error(at + " must be \"a b\" or [\"a\", \"b\"]");
      }
    }
  }
  auto unk = j.find("unk_token");
  if (unk != j.end() && !unk->is_null()) {
    if (!unk->is_string()) throw Error("model: \"unk_token\" must be a string");
    auto it = m->vocab_.find(unk->get<std::string>());
    if (it == m->vocab_.end()) throw Error("model: unk_token '" + unk->get<std::string>() + "' is not in the vocab");
    m->unk_id_ = it->second;
  }
  m->fuse_unk_ = json_fields::bool_field(j, "fuse_unk", where, false);
  m->ignore_merges_ = json_fields::bool_field(j, "ignore_merges", where, false);
  m->build(merges);
  return m;
}

BpeModel::BpeModel(std::unordered_map<std::string, int32_t> vocab,
                   const std::vector<std::pair<std::string, std::string>>& merges)
    : vocab_(std::move(vocab)) {
  for (const auto& [token, id] : vocab_) {
    vocab_r_.emplace(id, token);
    max_id_ = std::max(max_id_, id);
  }
  build(merges);
}

void BpeModel::build(const std::vector<std::pair<std::string, std::string>>& merges) {
  merges_.reserve(merges.size());
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    auto ia = vocab_.find(a), ib = vocab_.find(b), in = vocab_.find(a + b);
    if (ia == vocab_.end()) throw Error("model merges[" + std::to_string(rank) + "]: '" + a + "' is not in the vocab");
    if (ib == vocab_.end()) throw Error("model merges[" + std::to_string(rank) + "]: '" + b + "' is not in the vocab");
    if (in == vocab_.end())
      throw Error("model merges[" + std::to_string(rank) + "]: the merged token '" + a + b + "' is not in the vocab");
    // A repeated pair keeps its last rank, as HF's map built in file order does.
    merges_[pair_key(ia->second, ib->second)] = Merge{static_cast<int32_t>(rank), in->second};
  }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  auto it = vocab_r_.find(id);
  return it == vocab_r_.end() ? nullptr : &it->second;
}

std::vector<int32_t> BpeModel::merge_word(std::string_view word) const {
  struct Symbol {
    int32_t id;
    int64_t prev, next;
    std::size_t len;  // bytes; 0 marks a symbol merged into its left neighbour
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  auto add = [&](int32_t id, std::size_t len) {
    const int64_t n = static_cast<int64_t>(sym.size());
    if (n > 0) sym.back().next = n;
    sym.push_back({id, n - 1, -1, len});
  };
  // Characters not in the vocab become unk (fused into one when fuse_unk), or are dropped
  // when there is no unk token, as in HF.
  bool unk_pending = false;  // an unk symbol not yet added (it may still grow when fused)
  std::size_t unk_len = 0;
  std::size_t i = 0;
  while (i < word.size()) {
    const std::size_t at = i;
    std::size_t n = utf8::valid_sequence_length(word, i);
    if (n == 0) n = 1;
    i += n;
    auto it = vocab_.find(std::string(word.substr(at, n)));
    if (it != vocab_.end()) {
      if (unk_pending) add(*unk_id_, unk_len);
      unk_pending = false;
      add(it->second, n);
    } else if (unk_id_) {
      if (unk_pending && fuse_unk_) {
        unk_len += n;
      } else {
        if (unk_pending) add(*unk_id_, unk_len);
        unk_pending = true;
        unk_len = n;
      }
    }
  }
  if (unk_pending) add(*unk_id_, unk_len);

  struct Entry {
    int32_t rank;
    std::size_t pos;
    int32_t new_id;
    bool operator>(const Entry& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue;
  auto lookup = [&](int32_t a, int32_t b) -> const Merge* {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (std::size_t p = 0; p + 1 < sym.size(); ++p)
    if (const Merge* m = lookup(sym[p].id, sym[p + 1].id)) queue.push({m->rank, p, m->new_id});
  while (!queue.empty()) {
    const Entry top = queue.top();
    queue.pop();
    Symbol& cur = sym[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const std::size_t next_pos = static_cast<std::size_t>(cur.next);
    const Symbol right = sym[next_pos];
    // A stale entry (its pair changed since it was queued) is skipped by HF when the pair now
    // there does not produce the same token; the same rule here keeps the ids identical.
    const Merge* now = lookup(cur.id, right.id);
    if (!now || now->new_id != top.new_id) continue;
    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    sym[next_pos].len = 0;
    if (right.next > -1 && static_cast<std::size_t>(right.next) < sym.size())
      sym[static_cast<std::size_t>(right.next)].prev = static_cast<int64_t>(top.pos);
    if (cur.prev >= 0) {
      const std::size_t prev = static_cast<std::size_t>(cur.prev);
      if (const Merge* m = lookup(sym[prev].id, cur.id)) queue.push({m->rank, prev, m->new_id});
    }
    if (cur.next > -1 && static_cast<std::size_t>(cur.next) < sym.size()) {
      if (const Merge* m = lookup(cur.id, sym[static_cast<std::size_t>(cur.next)].id))
        queue.push({m->rank, top.pos, m->new_id});
    }
  }
  std::vector<int32_t> ids;
  for (const Symbol& s : sym)
    if (s.len != 0) ids.push_back(s.id);
  return ids;
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    auto it = vocab_.find(std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheableWord;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(std::string(word));
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mu_);
    if (cache_.size() >= kCacheEntries) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace parity::tokenizer
