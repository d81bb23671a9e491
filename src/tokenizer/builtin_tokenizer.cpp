#include "tokenizer/builtin_tokenizer.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/pre_tokenizer.h"

namespace parity::tokenizer {

namespace {

// Written for this purpose: plain English with the words the README's examples use.
constexpr const char* kTrainingText = R"(The model reads a prompt and writes a continuation, one token at a time.
A token is a piece of text: a word, part of a word, a space and a word, a digit or a sign.
Parity is an inference engine for Mamba2 and hybrid models. It runs on the CPU, and the same
request gives the same bits in exact mode whatever else the engine is running at the same time.
The state of a Mamba layer is a fixed size, so a long prompt costs no more memory than a short one.
Attention layers keep a cache of keys and values for every position they have seen.
Hello, world! Hello there. How are you today? I am fine, thank you. What is the time?
Once upon a time there was a small machine that wanted to learn how to write stories.
It read many books, and every night it tried to write a new sentence of its own.
Some sentences were good and some were strange, but the machine kept on writing.
The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with one step.
In 2024 the numbers 1, 2, 3, 10, 42, 100, 256, 1000 and 65536 all appeared in the tests.
def score(model, tokens):
    logits = model.forward(tokens)
    return logits[-1]
Users send requests to a server; the server batches them and streams tokens back.
Each request has a prompt, a limit on new tokens, a temperature and a seed for sampling.
When the temperature is zero the engine picks the most likely token at every step.
The tokenizer turns text into ids and ids back into text, and the two must agree.
We measure, we compare, we check the result, and then we write down what we found.
This is a test. This is only a test. If this were real, you would be told what to do next.
)";

using Pair = std::pair<std::string, std::string>;

struct Word {
  std::vector<std::string> symbols;
  int count;
};

// The most frequent adjacent pair over all words (ties: the smallest pair in byte order).
bool best_pair(const std::vector<Word>& words, Pair& best, int min_count) {
  std::map<Pair, int> counts;
  for (const Word& w : words)
    for (std::size_t i = 0; i + 1 < w.symbols.size(); ++i) counts[{w.symbols[i], w.symbols[i + 1]}] += w.count;
  int best_count = 0;
  for (const auto& [p, c] : counts)
    if (c > best_count) {
      best_count = c;
      best = p;
    }
  return best_count >= min_count;
}

void apply_merge(std::vector<Word>& words, const Pair& p) {
  for (Word& w : words) {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < w.symbols.size(); ++i) {
      if (i + 1 < w.symbols.size() && w.symbols[i] == p.first && w.symbols[i + 1] == p.second) {
        out.push_back(p.first + p.second);
        ++i;
      } else {
        out.push_back(w.symbols[i]);
      }
    }
    w.symbols = std::move(out);
  }
}

bool all_letters(const std::string& s, std::size_t from) {
  if (s.size() <= from) return false;
  return std::all_of(s.begin() + static_cast<std::ptrdiff_t>(from), s.end(),
                     [](char c) { return (c >= 'a' && c <= 'z'); });
}

}  // namespace

std::string builtin_tokenizer_json(int vocab_size) {
  if (vocab_size < 258) throw Error("the built-in tokenizer needs a vocabulary of at least 258 ids");
  nlohmann::json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  auto pre_tokenizer = PreTokenizer::from_json(pre);

  nlohmann::json vocab = nlohmann::json::object();
  std::set<std::string> have;
  auto add_token = [&](const std::string& t) {
    vocab[t] = static_cast<int>(have.size()) + 1;  // id 0 is <|endoftext|>
    have.insert(t);
  };
  vocab["<|endoftext|>"] = 0;
  for (int b = 0; b < 256; ++b) {
    std::string t;
    byte_level::encode(t, std::string(1, static_cast<char>(b)));
    add_token(t);
  }
  // Word counts of the text, in first-seen order (a vector, so no hash order leaks in).
  std::vector<Word> words;
  std::map<std::string, std::size_t> index;
  for (const std::string& w : pre_tokenizer->apply(kTrainingText)) {
    auto [it, fresh] = index.emplace(w, words.size());
    if (fresh) {
      Word word{{}, 0};
      std::size_t i = 0;
      while (i < w.size()) {  // byte-level characters are 1 or 2 bytes
        const std::size_t n = (static_cast<unsigned char>(w[i]) < 0x80) ? 1 : 2;
        word.symbols.push_back(w.substr(i, n));
        i += n;
      }
      words.push_back(std::move(word));
    }
    words[it->second].count += 1;
  }
  nlohmann::json merges = nlohmann::json::array();
  std::vector<std::string> learned;
  const std::size_t want = static_cast<std::size_t>(vocab_size) - 1;
  Pair p;
  while (have.size() < want && best_pair(words, p, 2)) {
    apply_merge(words, p);
    const std::string t = p.first + p.second;
    merges.push_back(p.first + " " + p.second);
    if (have.count(t)) continue;  // the same string reached by another split
    add_token(t);
    learned.push_back(t);
  }
  // Fill: a learned word start (Ġ + letters) followed by a learned piece of letters.
  std::vector<std::string> starts, tails;
  const std::string G = "\xC4\xA0";  // Ġ, the byte-level space
  for (const std::string& t : learned) {
    if (t.rfind(G, 0) == 0 && all_letters(t, G.size())) starts.push_back(t);
    if (all_letters(t, 0)) tails.push_back(t);
  }
  auto fill = [&](const std::vector<std::string>& lefts, const std::vector<std::string>& rights,
                  std::vector<std::string>* made) {
    for (const std::string& b : rights)
      for (const std::string& a : lefts) {
        if (have.size() >= want) return;
        if (have.count(a + b)) continue;
        merges.push_back(a + " " + b);
        add_token(a + b);
        if (made) made->push_back(a + b);
      }
  };
  std::vector<std::string> words2;
  fill(starts, tails, &words2);  // " the" + "re"
  fill(tails, tails, nullptr);   // "re" + "ad"
  fill(words2, tails, nullptr);  // " there" + "ad"
  // Ids that still have no token (only possible for vocabularies far beyond the text): padding tokens.
  for (int id = static_cast<int>(have.size()) + 1; id < vocab_size; ++id) add_token("<|pad_" + std::to_string(id) + "|>");

  nlohmann::ordered_json doc;
  doc["version"] = "1.0";
  doc["truncation"] = nullptr;
  doc["padding"] = nullptr;
  doc["added_tokens"] = nlohmann::json::array({{{"id", 0},
                                                {"content", "<|endoftext|>"},
                                                {"single_word", false},
                                                {"lstrip", false},
                                                {"rstrip", false},
                                                {"normalized", false},
                                                {"special", true}}});
  doc["normalizer"] = {{"type", "NFC"}};
  doc["pre_tokenizer"] = pre;
  doc["post_processor"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  doc["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  doc["model"] = {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
                  {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
                  {"vocab", vocab}, {"merges", merges}};
  return doc.dump(2) + "\n";
}

}  // namespace parity::tokenizer
