#include "tokenizer/pre_tokenizer.h"

#include "common/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/regex.h"
#include "tokenizer/split.h"
#include "tokenizer/unicode_props.h"
#include "tokenizer/utf8.h"

namespace parity::tokenizer {

namespace {

constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

const Regex& gpt2_regex() {
  static const Regex re(kGpt2Pattern, "ByteLevel pre-tokenizer");
  return re;
}

}  // namespace

struct PreTokenizer::Step {
  enum class Kind { ByteLevel, Split, Digits } kind;
  bool add_prefix_space = false, use_regex = true;
  std::shared_ptr<Regex> regex;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false, individual_digits = false;

  void apply(const std::string& piece, std::vector<std::string>& out) const {
    switch (kind) {
      case Kind::ByteLevel: {
        std::string text = piece;
        if (add_prefix_space && (text.empty() || text[0] != ' ')) text.insert(text.begin(), ' ');
        std::vector<std::string> words;
        if (use_regex)
          split_into(text, cover(gpt2_regex().find_all(text), text.size()), SplitBehavior::Isolated, false, words);
        else if (!text.empty())
          words.push_back(std::move(text));
        for (const std::string& w : words) {
          std::string mapped;
          byte_level::encode(mapped, w);
          out.push_back(std::move(mapped));
        }
        return;
      }
      case Kind::Split:
        split_into(piece, cover(regex->find_all(piece), piece.size()), behavior, invert, out);
        return;
      case Kind::Digits: {
        std::vector<std::pair<std::size_t, std::size_t>> matches;
        std::size_t i = 0;
        while (i < piece.size()) {
          const std::size_t at = i;
          const char32_t c = utf8::next(piece, i);
          if (unicode::is_numeric(c)) matches.emplace_back(at, i);
        }
        split_into(piece, cover(matches, piece.size()),
                   individual_digits ? SplitBehavior::Isolated : SplitBehavior::Contiguous, false, out);
        return;
      }
    }
  }
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;

std::unique_ptr<PreTokenizer> PreTokenizer::from_json(const nlohmann::json& j) {
  std::unique_ptr<PreTokenizer> p(new PreTokenizer());
  if (j.is_null()) return p;
  // Sequence is flattened: applying each step to every piece in turn is what Sequence does.
  auto parse = [&](auto&& self, const nlohmann::json& node, int depth) -> void {
    const std::string where = "pre_tokenizer";
    if (depth > 16) throw Error(where + ": Sequence nested too deeply");
    const std::string type = json_fields::type_of(node, where);
    if (type == "Sequence") {
      const nlohmann::json& list = json_fields::array_field(node, "pretokenizers", where);
      for (const auto& sub : list) self(self, sub, depth + 1);
      return;
    }
    Step s{};
    if (type == "ByteLevel") {
      s.kind = Step::Kind::ByteLevel;
      s.add_prefix_space = json_fields::bool_field(node, "add_prefix_space", where, true);
      s.use_regex = json_fields::bool_field(node, "use_regex", where, true);
      json_fields::bool_field(node, "trim_offsets", where, true);
    } else if (type == "Split") {
      s.kind = Step::Kind::Split;
      const nlohmann::json& pat = json_fields::object_field(node, "pattern", where);
      if (pat.contains("Regex") && pat["Regex"].is_string())
        s.regex = std::make_shared<Regex>(pat["Regex"].get<std::string>(), "Split pre-tokenizer");
      else if (pat.contains("String") && pat["String"].is_string())
        s.regex = std::make_shared<Regex>(Regex::escape(pat["String"].get<std::string>()), "Split pre-tokenizer");
      else
        throw Error(where + ": Split pattern must be {\"Regex\": …} or {\"String\": …}");
      s.behavior = parse_split_behavior(json_fields::string_field(node, "behavior", where), "Split pre-tokenizer");
      s.invert = json_fields::bool_field(node, "invert", where, false);
    } else if (type == "Digits") {
      s.kind = Step::Kind::Digits;
      s.individual_digits = json_fields::bool_field(node, "individual_digits", where, false);
    } else {
      throw Error("unsupported pre-tokenizer '" + type +
                  "' (parity supports ByteLevel, Split, Digits and Sequence of them)");
    }
    p->steps_.push_back(std::move(s));
  };
  parse(parse, j, 0);
  return p;
}

std::vector<std::string> PreTokenizer::apply(const std::string& text) const {
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.push_back(text);
  for (const Step& s : steps_) {
    std::vector<std::string> next;
    next.reserve(pieces.size());
    for (const std::string& p : pieces) s.apply(p, next);
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace parity::tokenizer
