#include "frontends/server/chat_template.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <variant>

#include <nlohmann/json.hpp>

#include "common/error.h"

// A Jinja2 subset, interpreted the way Hugging Face's apply_chat_template runs it (trim_blocks and
// lstrip_blocks on). Parsing builds a small tree; rendering walks it with scoped variables.
namespace parity::server {

namespace {

[[noreturn]] void fail(const std::string& what) { throw Error("chat template: " + what); }

// ---- values ----

struct Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, as Python's dict

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, Str, List, Dict } kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::shared_ptr<List> l;
  std::shared_ptr<Dict> d;  // a namespace() is a Dict whose attributes can be set

  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value boolean(bool x) { Value v; v.kind = Kind::Bool; v.b = x; return v; }
  static Value integer(int64_t x) { Value v; v.kind = Kind::Int; v.i = x; return v; }
  static Value number(double x) { Value v; v.kind = Kind::Float; v.f = x; return v; }
  static Value str(std::string x) { Value v; v.kind = Kind::Str; v.s = std::move(x); return v; }
  static Value list(List x = {}) { Value v; v.kind = Kind::List; v.l = std::make_shared<List>(std::move(x)); return v; }
  static Value dict(Dict x = {}) { Value v; v.kind = Kind::Dict; v.d = std::make_shared<Dict>(std::move(x)); return v; }

  bool numeric() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  double as_double() const { return kind == Kind::Float ? f : kind == Kind::Bool ? double(b) : double(i); }
  const Value* get(const std::string& key) const {
    if (kind != Kind::Dict) return nullptr;
    for (const auto& [k, v] : *d)
      if (k == key) return &v;
    return nullptr;
  }
  void set(const std::string& key, Value v) {
    for (auto& [k, old] : *d)
      if (k == key) {
        old = std::move(v);
        return;
      }
    d->emplace_back(key, std::move(v));
  }
};

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return false;
    case Value::Kind::Bool: return v.b;
    case Value::Kind::Int: return v.i != 0;
    case Value::Kind::Float: return v.f != 0;
    case Value::Kind::Str: return !v.s.empty();
    case Value::Kind::List: return !v.l->empty();
    case Value::Kind::Dict: return !v.d->empty();
  }
  return false;
}

std::string py_float(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  if (x == std::floor(x) && std::fabs(x) < 1e16) {
    std::ostringstream o;
    o << static_cast<int64_t>(x) << ".0";
    return o.str();
  }
  std::ostringstream o;
  o.precision(17);
  o << x;
  return o.str();
}

std::string repr(const Value& v);

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::None: return "None";
    case Value::Kind::Bool: return v.b ? "True" : "False";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Float: return py_float(v.f);
    case Value::Kind::Str: return v.s;
    default: return repr(v);
  }
}

std::string repr(const Value& v) {
  if (v.kind == Value::Kind::Str) {
    std::string q = v.s.find('\'') != std::string::npos && v.s.find('"') == std::string::npos ? "\"" : "'";
    std::string out = q;
    for (char c : v.s) {
      if (c == '\\') out += "\\\\";
      else if (c == '\n') out += "\\n";
      else if (std::string(1, c) == q) out += "\\" + q;
      else out += c;
    }
    return out + q;
  }
  if (v.kind == Value::Kind::List) {
    std::string out = "[";
    for (std::size_t k = 0; k < v.l->size(); ++k) out += (k ? ", " : "") + repr((*v.l)[k]);
    return out + "]";
  }
  if (v.kind == Value::Kind::Dict) {
    std::string out = "{";
    bool first = true;
    for (const auto& [k, x] : *v.d) {
      out += (first ? "" : ", ") + repr(Value::str(k)) + ": " + repr(x);
      first = false;
    }
    return out + "}";
  }
  return to_str(v);
}

// Python's json.dumps(x, ensure_ascii=False) (HF's tojson): ", " and ": " separators.
std::string to_json(const Value& v, int indent, int depth) {
  const std::string nl = indent > 0 ? "\n" + std::string(std::size_t(indent) * std::size_t(depth + 1), ' ') : "";
  const std::string close = indent > 0 ? "\n" + std::string(std::size_t(indent) * std::size_t(depth), ' ') : "";
  const std::string sep = indent > 0 ? "," : ", ";
  switch (v.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return "null";
    case Value::Kind::Bool: return v.b ? "true" : "false";
    case Value::Kind::Int: return std::to_string(v.i);
    case Value::Kind::Float: return py_float(v.f);
    case Value::Kind::Str: return nlohmann::json(v.s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    case Value::Kind::List: {
      if (v.l->empty()) return "[]";
      std::string out = "[";
      for (std::size_t k = 0; k < v.l->size(); ++k) out += (k ? sep : "") + nl + to_json((*v.l)[k], indent, depth + 1);
      return out + close + "]";
    }
    case Value::Kind::Dict: {
      if (v.d->empty()) return "{}";
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : *v.d) {
        out += (first ? "" : sep) + nl + to_json(Value::str(k), 0, 0) + ": " + to_json(x, indent, depth + 1);
        first = false;
      }
      return out + close + "}";
    }
  }
  return "null";
}

bool equal(const Value& a, const Value& b) {
  if (a.numeric() && b.numeric()) return a.as_double() == b.as_double();
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::Undefined:
    case Value::Kind::None: return true;
    case Value::Kind::Str: return a.s == b.s;
    case Value::Kind::List:
      if (a.l->size() != b.l->size()) return false;
      for (std::size_t k = 0; k < a.l->size(); ++k)
        if (!equal((*a.l)[k], (*b.l)[k])) return false;
      return true;
    case Value::Kind::Dict: return a.d == b.d;
    default: return false;
  }
}

// ---- expressions ----

struct Tok {
  enum class T { Name, Str, Int, Float, Op, End } t = T::End;
  std::string s;
  int64_t i = 0;
  double f = 0;
};

std::vector<Tok> lex(const std::string& src) {
  std::vector<Tok> out;
  std::size_t p = 0;
  while (p < src.size()) {
    const char c = src[p];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++p;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t q = p;
      while (q < src.size() && (std::isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_')) ++q;
      out.push_back({Tok::T::Name, src.substr(p, q - p)});
      p = q;
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t q = p;
      while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) ++q;
      if (q + 1 < src.size() && src[q] == '.' && std::isdigit(static_cast<unsigned char>(src[q + 1]))) {
        ++q;
        while (q < src.size() && std::isdigit(static_cast<unsigned char>(src[q]))) ++q;
        Tok t{Tok::T::Float, src.substr(p, q - p)};
        t.f = std::stod(t.s);
        out.push_back(t);
      } else {
        Tok t{Tok::T::Int, src.substr(p, q - p)};
        if (t.s.size() > 18) fail("integer literal too long: " + t.s);
        t.i = std::stoll(t.s);
        out.push_back(t);
      }
      p = q;
    } else if (c == '\'' || c == '"') {
      std::string s;
      std::size_t q = p + 1;
      for (;; ++q) {
        if (q >= src.size()) fail("unterminated string literal");
        if (src[q] == c) break;
        if (src[q] == '\\' && q + 1 < src.size()) {
          const char e = src[++q];
          s += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          s += src[q];
        }
      }
      out.push_back({Tok::T::Str, s});
      p = q + 1;
    } else {
      static const char* ops[] = {"==", "!=", "<=", ">=", "//", "**", "<", ">", "+", "-", "*", "/", "%", "~",
                                  "(",  ")",  "[",  "]",  "{",  "}",  ",", ":", ".", "|", "="};
      bool found = false;
      for (const char* op : ops) {
        const std::size_t n = std::char_traits<char>::length(op);
        if (src.compare(p, n, op) == 0) {
          out.push_back({Tok::T::Op, op});
          p += n;
          found = true;
          break;
        }
      }
      if (!found) fail(std::string("unexpected character '") + c + "'");
    }
  }
  out.push_back({Tok::T::End, ""});
  return out;
}

struct Expr {
  enum class K { Lit, Var, Attr, Index, Slice, Call, Filter, Test, Unary, Binary, Cond, ListLit, DictLit } k;
  std::string name;  // Var/Attr/Call/Filter/Test name, operator
  Value lit;
  std::vector<std::unique_ptr<Expr>> kids;  // operands; Call/Filter: target first (if any), then args
  std::vector<std::string> kwnames;         // names of trailing keyword args
  bool negate = false;                      // `is not`
};
using ExprP = std::unique_ptr<Expr>;

ExprP node(Expr::K k, std::string name = {}) {
  auto e = std::make_unique<Expr>();
  e->k = k;
  e->name = std::move(name);
  return e;
}

class ExprParser {
 public:
  explicit ExprParser(std::vector<Tok> toks) : t_(std::move(toks)) {}
  ExprP parse() { return ternary(); }
  bool at_end() const { return t_[p_].t == Tok::T::End; }
  const Tok& peek() const { return t_[p_]; }
  bool is_name(const char* n) const { return t_[p_].t == Tok::T::Name && t_[p_].s == n; }
  bool is_op(const char* o) const { return t_[p_].t == Tok::T::Op && t_[p_].s == o; }
  void expect_op(const char* o) {
    if (!is_op(o)) fail(std::string("expected '") + o + "', found '" + t_[p_].s + "'");
    ++p_;
  }
  std::string name() {
    if (t_[p_].t != Tok::T::Name) fail("expected a name, found '" + t_[p_].s + "'");
    return t_[p_++].s;
  }
  void expect_end() {
    if (!at_end()) fail("unexpected '" + t_[p_].s + "'");
  }

 private:
  ExprP ternary() {
    ExprP a = or_();
    if (is_name("if")) {
      ++p_;
      auto e = node(Expr::K::Cond);
      ExprP cond = or_();
      ExprP other = is_name("else") ? (++p_, ternary()) : node(Expr::K::Lit, "implicit-else");
      e->kids.push_back(std::move(cond));
      e->kids.push_back(std::move(a));
      e->kids.push_back(std::move(other));
      return e;
    }
    return a;
  }
  ExprP binary(ExprP a, std::string op, ExprP b) {
    auto e = node(Expr::K::Binary, std::move(op));
    e->kids.push_back(std::move(a));
    e->kids.push_back(std::move(b));
    return e;
  }
  ExprP or_() {
    ExprP a = and_();
    while (is_name("or")) {
      ++p_;
      a = binary(std::move(a), "or", and_());
    }
    return a;
  }
  ExprP and_() {
    ExprP a = not_();
    while (is_name("and")) {
      ++p_;
      a = binary(std::move(a), "and", not_());
    }
    return a;
  }
  ExprP not_() {
    if (is_name("not")) {
      ++p_;
      auto e = node(Expr::K::Unary, "not");
      e->kids.push_back(not_());
      return e;
    }
    return compare();
  }
  ExprP compare() {
    ExprP a = concat();
    for (;;) {
      if (t_[p_].t == Tok::T::Op && (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        std::string op = t_[p_++].s;
        a = binary(std::move(a), op, concat());
      } else if (is_name("in")) {
        ++p_;
        a = binary(std::move(a), "in", concat());
      } else if (is_name("not") && t_[p_ + 1].t == Tok::T::Name && t_[p_ + 1].s == "in") {
        p_ += 2;
        a = binary(std::move(a), "not in", concat());
      } else if (is_name("is")) {
        ++p_;
        auto e = node(Expr::K::Test);
        if (is_name("not")) {
          ++p_;
          e->negate = true;
        }
        e->name = name();
        e->kids.push_back(std::move(a));
        // A test's argument: `is divisibleby 3`, `is equalto x`, `is sameas(x)`.
        if (is_op("(")) {
          args(*e);
        } else if (t_[p_].t == Tok::T::Str || t_[p_].t == Tok::T::Int || t_[p_].t == Tok::T::Float ||
                   (t_[p_].t == Tok::T::Name && t_[p_].s != "and" && t_[p_].s != "or" && t_[p_].s != "else" &&
                    t_[p_].s != "if")) {
          e->kids.push_back(concat());
        }
        a = std::move(e);
      } else {
        return a;
      }
    }
  }
  ExprP concat() {
    ExprP a = additive();
    while (is_op("~")) {
      ++p_;
      a = binary(std::move(a), "~", additive());
    }
    return a;
  }
  ExprP additive() {
    ExprP a = mul();
    while (is_op("+") || is_op("-")) {
      std::string op = t_[p_++].s;
      a = binary(std::move(a), op, mul());
    }
    return a;
  }
  ExprP mul() {
    ExprP a = unary();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = t_[p_++].s;
      a = binary(std::move(a), op, unary());
    }
    return a;
  }
  ExprP unary() {
    if (is_op("-") || is_op("+")) {
      std::string op = t_[p_++].s;
      auto e = node(Expr::K::Unary, op);
      e->kids.push_back(unary());
      return e;
    }
    return postfix();
  }
  void args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (t_[p_].t == Tok::T::Name && t_[p_ + 1].t == Tok::T::Op && t_[p_ + 1].s == "=") {
        e.kwnames.push_back(t_[p_].s);
        p_ += 2;
      } else if (!e.kwnames.empty()) {
        fail("a positional argument after a keyword argument");
      }
      e.kids.push_back(ternary());
      if (!is_op(",")) break;
      ++p_;
    }
    expect_op(")");
  }
  ExprP postfix() {
    ExprP a = primary();
    for (;;) {
      if (is_op(".")) {
        ++p_;
        auto e = node(Expr::K::Attr, name());
        e->kids.push_back(std::move(a));
        a = std::move(e);
      } else if (is_op("[")) {
        ++p_;
        ExprP idx[3];
        int parts = 0;
        bool slice = false;
        for (;;) {
          if (!is_op(":") && !is_op("]")) idx[parts] = ternary();
          if (is_op(":")) {
            slice = true;
            if (++parts > 2) fail("a slice has at most three parts");
            ++p_;
            continue;
          }
          break;
        }
        expect_op("]");
        auto e = node(slice ? Expr::K::Slice : Expr::K::Index);
        e->kids.push_back(std::move(a));
        for (int k = 0; k < (slice ? 3 : 1); ++k) e->kids.push_back(idx[k] ? std::move(idx[k]) : nullptr);
        a = std::move(e);
      } else if (is_op("(")) {
        auto e = node(Expr::K::Call);
        e->kids.push_back(std::move(a));
        args(*e);
        a = std::move(e);
      } else if (is_op("|")) {
        ++p_;
        auto e = node(Expr::K::Filter, name());
        e->kids.push_back(std::move(a));
        if (is_op("(")) args(*e);
        a = std::move(e);
      } else {
        return a;
      }
    }
  }
  ExprP primary() {
    const Tok& t = t_[p_];
    if (t.t == Tok::T::Str) {
      auto e = node(Expr::K::Lit);
      std::string s;
      while (t_[p_].t == Tok::T::Str) s += t_[p_++].s;  // adjacent literals concatenate
      e->lit = Value::str(s);
      return e;
    }
    if (t.t == Tok::T::Int || t.t == Tok::T::Float) {
      auto e = node(Expr::K::Lit);
      e->lit = t.t == Tok::T::Int ? Value::integer(t.i) : Value::number(t.f);
      ++p_;
      return e;
    }
    if (t.t == Tok::T::Name) {
      ++p_;
      auto e = node(Expr::K::Lit);
      if (t.s == "true" || t.s == "True") e->lit = Value::boolean(true);
      else if (t.s == "false" || t.s == "False") e->lit = Value::boolean(false);
      else if (t.s == "none" || t.s == "None") e->lit = Value::none();
      else return node(Expr::K::Var, t.s);
      return e;
    }
    if (is_op("(")) {
      ++p_;
      ExprP e = ternary();
      if (is_op(",")) fail("tuples are not supported");
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      ++p_;
      auto e = node(Expr::K::ListLit);
      while (!is_op("]")) {
        e->kids.push_back(ternary());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("]");
      return e;
    }
    if (is_op("{")) {
      ++p_;
      auto e = node(Expr::K::DictLit);
      while (!is_op("}")) {
        e->kids.push_back(ternary());
        expect_op(":");
        e->kids.push_back(ternary());
        if (!is_op(",")) break;
        ++p_;
      }
      expect_op("}");
      return e;
    }
    fail("unexpected '" + t.s + "' in an expression");
  }

  std::vector<Tok> t_;
  std::size_t p_ = 0;
};

// ---- statements ----

struct Node {
  enum class K { Text, Output, If, For, Set } k;
  std::string text;                          // Text
  std::vector<ExprP> exprs;                  // Output: [e]; If: conditions; For: [iterable, filter?]; Set: [value]
  std::vector<std::vector<Node>> bodies;     // If: one per condition (+ else); For: body (+ else)
  std::vector<std::string> names;            // For: loop variables; Set: target (name, or ns + attr)
};

struct Tag {
  enum class K { Text, Output, Block } k;
  std::string body;  // text, or the tag's inside
};

// Splits the source into text and tags with Jinja's whitespace rules (trim_blocks, lstrip_blocks,
// and the '-' markers).
std::vector<Tag> split_tags(const std::string& src) {
  std::vector<Tag> out;
  std::size_t p = 0;
  bool strip_next = false, trim_newline = false;
  for (;;) {
    std::size_t open = src.find('{', p);
    while (open != std::string::npos && open + 1 < src.size() && src[open + 1] != '{' && src[open + 1] != '%' &&
           src[open + 1] != '#')
      open = src.find('{', open + 1);
    if (open + 1 >= src.size()) open = std::string::npos;
    std::string text = src.substr(p, open == std::string::npos ? std::string::npos : open - p);
    if (trim_newline) {
      if (text.rfind("\r\n", 0) == 0) text.erase(0, 2);
      else if (text.rfind("\n", 0) == 0) text.erase(0, 1);
    }
    if (strip_next) text.erase(0, text.find_first_not_of(" \t\r\n") == std::string::npos ? text.size() : text.find_first_not_of(" \t\r\n"));
    strip_next = trim_newline = false;
    if (open == std::string::npos) {
      if (!text.empty()) out.push_back({Tag::K::Text, text});
      return out;
    }
    const char kind = src[open + 1];
    const bool minus = open + 2 < src.size() && src[open + 2] == '-';
    const bool plus = open + 2 < src.size() && src[open + 2] == '+';
    if (minus) {
      const std::size_t keep = text.find_last_not_of(" \t\r\n");
      text.erase(keep == std::string::npos ? 0 : keep + 1);
    } else if (kind != '{' && !plus) {
      // lstrip_blocks: a block tag preceded on its line only by spaces or tabs loses them.
      const std::size_t nl = text.find_last_of('\n');
      const std::size_t start = nl == std::string::npos ? 0 : nl + 1;
      if ((nl != std::string::npos || p == 0 || out.empty()) && text.find_first_not_of(" \t", start) == std::string::npos)
        text.erase(start);
    }
    if (!text.empty()) out.push_back({Tag::K::Text, text});
    const std::string close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    const std::size_t inner = open + 2 + ((minus || plus) ? 1 : 0);
    const std::size_t end = src.find(close, inner);
    if (end == std::string::npos) fail(std::string("unclosed '{") + kind + "'");
    std::size_t inner_end = end;
    if (inner_end > inner && src[inner_end - 1] == '-') {
      strip_next = true;
      --inner_end;
    } else if (inner_end > inner && src[inner_end - 1] == '+') {
      --inner_end;
    } else if (kind != '{') {
      trim_newline = true;  // trim_blocks
    }
    if (kind == '{') out.push_back({Tag::K::Output, src.substr(inner, inner_end - inner)});
    else if (kind == '%') out.push_back({Tag::K::Block, src.substr(inner, inner_end - inner)});
    p = end + 2;
  }
}

class TemplateParser {
 public:
  explicit TemplateParser(std::vector<Tag> tags) : tags_(std::move(tags)) {}
  std::vector<Node> parse() {
    std::string stop;
    auto body = block({}, &stop);
    if (!stop.empty()) fail("'" + stop + "' without its opening tag");
    return body;
  }

 private:
  // Parses nodes until a block tag whose first word is in `ends`; that word goes to *stop and its
  // expression tokens to rest_.
  std::vector<Node> block(const std::vector<std::string>& ends, std::string* stop) {
    std::vector<Node> out;
    while (p_ < tags_.size()) {
      const Tag& t = tags_[p_++];
      if (t.k == Tag::K::Text) {
        out.push_back({Node::K::Text, t.body, {}, {}, {}});
        continue;
      }
      ExprParser ep(lex(t.body));
      if (t.k == Tag::K::Output) {
        Node n{Node::K::Output, {}, {}, {}, {}};
        n.exprs.push_back(ep.parse());
        ep.expect_end();
        out.push_back(std::move(n));
        continue;
      }
      const std::string word = ep.name();
      if (std::find(ends.begin(), ends.end(), word) != ends.end()) {
        *stop = word;
        rest_ = std::make_unique<ExprParser>(std::move(ep));
        return out;
      }
      if (word == "if") {
        Node n{Node::K::If, {}, {}, {}, {}};
        n.exprs.push_back(ep.parse());
        ep.expect_end();
        for (;;) {
          std::string s;
          n.bodies.push_back(block({"elif", "else", "endif"}, &s));
          if (s == "elif") {
            n.exprs.push_back(rest_->parse());
            rest_->expect_end();
          } else if (s == "else") {
            rest_->expect_end();
            std::string s2;
            n.bodies.push_back(block({"endif"}, &s2));
            if (s2 != "endif") fail("'if' without 'endif'");
            break;
          } else if (s == "endif") {
            break;
          } else {
            fail("'if' without 'endif'");
          }
        }
        out.push_back(std::move(n));
      } else if (word == "for") {
        Node n{Node::K::For, {}, {}, {}, {}};
        n.names.push_back(ep.name());
        while (ep.is_op(",")) {
          ep.expect_op(",");
          n.names.push_back(ep.name());
        }
        if (ep.name() != "in") fail("expected 'in' in a for loop");
        ExprP it = ep.parse();
        // `for x in xs if cond`: parsed as a conditional without else; it is the loop's filter.
        if (it->k == Expr::K::Cond && it->kids[2]->name == "implicit-else") {
          n.exprs.push_back(std::move(it->kids[1]));
          n.exprs.push_back(std::move(it->kids[0]));
        } else {
          n.exprs.push_back(std::move(it));
        }
        if (ep.is_name("recursive")) fail("recursive loops are not supported");
        ep.expect_end();
        std::string s;
        n.bodies.push_back(block({"else", "endfor"}, &s));
        if (s == "else") {
          std::string s2;
          n.bodies.push_back(block({"endfor"}, &s2));
          if (s2 != "endfor") fail("'for' without 'endfor'");
        } else if (s != "endfor") {
          fail("'for' without 'endfor'");
        }
        out.push_back(std::move(n));
      } else if (word == "set") {
        Node n{Node::K::Set, {}, {}, {}, {}};
        n.names.push_back(ep.name());
        if (ep.is_op(".")) {
          ep.expect_op(".");
          n.names.push_back(ep.name());
        }
        if (!ep.is_op("=")) fail("block assignments ({% set x %}…{% endset %}) are not supported");
        ep.expect_op("=");
        n.exprs.push_back(ep.parse());
        ep.expect_end();
        out.push_back(std::move(n));
      } else {
        fail("the '" + word + "' tag is not supported (supported: if/elif/else, for/else, set)");
      }
    }
    return out;
  }

  std::vector<Tag> tags_;
  std::size_t p_ = 0;
  std::unique_ptr<ExprParser> rest_;
};

// ---- rendering ----

class Renderer {
 public:
  explicit Renderer(const ChatTemplateInput& in) {
    scopes_.emplace_back();
    List msgs;
    for (const ChatMessage& m : in.messages)
      msgs.push_back(Value::dict({{"role", Value::str(m.role)}, {"content", Value::str(m.content)}}));
    auto& g = scopes_.back();
    g["messages"] = Value::list(std::move(msgs));
    g["add_generation_prompt"] = Value::boolean(in.add_generation_prompt);
    if (in.bos_token) g["bos_token"] = Value::str(*in.bos_token);
    if (in.eos_token) g["eos_token"] = Value::str(*in.eos_token);
  }

  void render(const std::vector<Node>& nodes, std::string& out) {
    for (const Node& n : nodes) {
      if (++steps_ > 10'000'000) fail("the template runs too long");
      switch (n.k) {
        case Node::K::Text: out += n.text; break;
        case Node::K::Output: out += to_str(eval(*n.exprs[0])); break;
        case Node::K::If: {
          std::size_t k = 0;
          for (; k < n.exprs.size(); ++k)
            if (truthy(eval(*n.exprs[k]))) break;
          if (k < n.bodies.size()) render(n.bodies[k], out);
          break;
        }
        case Node::K::For: run_for(n, out); break;
        case Node::K::Set: {
          Value v = eval(*n.exprs[0]);
          if (n.names.size() == 1) {
            scopes_.back()[n.names[0]] = v;
          } else {
            Value ns = lookup(n.names[0]);
            if (ns.kind != Value::Kind::Dict) fail("'" + n.names[0] + "' is not a namespace");
            ns.set(n.names[1], v);
          }
          break;
        }
      }
    }
  }

 private:
  void run_for(const Node& n, std::string& out) {
    Value it = eval(*n.exprs[0]);
    List items;
    if (it.kind == Value::Kind::List) items = *it.l;
    else if (it.kind == Value::Kind::Dict)
      for (const auto& kv : *it.d) items.push_back(Value::str(kv.first));
    else if (it.kind == Value::Kind::Str)
      for (char c : it.s) items.push_back(Value::str(std::string(1, c)));
    else if (it.kind != Value::Kind::Undefined && it.kind != Value::Kind::None)
      fail("cannot loop over " + repr(it));
    auto bind = [&](const Value& item) {
      auto& sc = scopes_.back();
      if (n.names.size() == 1) {
        sc[n.names[0]] = item;
      } else {
        if (item.kind != Value::Kind::List || item.l->size() != n.names.size()) fail("cannot unpack " + repr(item));
        for (std::size_t k = 0; k < n.names.size(); ++k) sc[n.names[k]] = (*item.l)[k];
      }
    };
    if (n.exprs.size() > 1) {  // the loop filter sees each item bound
      List kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        bind(item);
        if (truthy(eval(*n.exprs[1]))) kept.push_back(item);
        scopes_.pop_back();
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (n.bodies.size() > 1) render(n.bodies[1], out);
      return;
    }
    const int64_t len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      scopes_.emplace_back();
      bind(items[static_cast<std::size_t>(k)]);
      Dict loop = {{"index", Value::integer(k + 1)},       {"index0", Value::integer(k)},
                   {"revindex", Value::integer(len - k)},  {"revindex0", Value::integer(len - k - 1)},
                   {"first", Value::boolean(k == 0)},      {"last", Value::boolean(k == len - 1)},
                   {"length", Value::integer(len)}};
      if (k > 0) loop.emplace_back("previtem", items[static_cast<std::size_t>(k - 1)]);
      if (k + 1 < len) loop.emplace_back("nextitem", items[static_cast<std::size_t>(k + 1)]);
      scopes_.back()["loop"] = Value::dict(std::move(loop));
      render(n.bodies[0], out);
      scopes_.pop_back();
    }
  }

  Value lookup(const std::string& name) const {
    for (auto s = scopes_.rbegin(); s != scopes_.rend(); ++s) {
      auto f = s->find(name);
      if (f != s->end()) return f->second;
    }
    return Value();
  }

  static int64_t as_int(const Value& v, const char* what) {
    if (v.kind == Value::Kind::Int) return v.i;
    if (v.kind == Value::Kind::Bool) return v.b;
    fail(std::string(what) + " must be an integer, not " + repr(v));
  }

  Value index(const Value& a, const Value& key) {
    if (a.kind == Value::Kind::Dict) {
      if (key.kind != Value::Kind::Str) return Value();
      const Value* v = a.get(key.s);
      return v ? *v : Value();
    }
    if (a.kind == Value::Kind::List || a.kind == Value::Kind::Str) {
      const int64_t n = a.kind == Value::Kind::List ? int64_t(a.l->size()) : int64_t(a.s.size());
      int64_t k = as_int(key, "an index");
      if (k < 0) k += n;
      if (k < 0 || k >= n) return Value();
      return a.kind == Value::Kind::List ? (*a.l)[std::size_t(k)] : Value::str(std::string(1, a.s[std::size_t(k)]));
    }
    return Value();
  }

  Value slice(const Value& a, const Expr* lo, const Expr* hi, const Expr* st) {
    if (a.kind != Value::Kind::List && a.kind != Value::Kind::Str) fail("cannot slice " + repr(a));
    const int64_t n = a.kind == Value::Kind::List ? int64_t(a.l->size()) : int64_t(a.s.size());
    const int64_t step = st ? as_int(eval(*st), "a slice step") : 1;
    if (step == 0) fail("slice step cannot be zero");
    auto bound = [&](const Expr* e, int64_t dflt) {
      if (!e) return dflt;
      int64_t v = as_int(eval(*e), "a slice bound");
      if (v < 0) v += n;
      return step > 0 ? std::clamp<int64_t>(v, 0, n) : std::clamp<int64_t>(v, -1, n - 1);
    };
    const int64_t b = bound(lo, step > 0 ? 0 : n - 1), e = bound(hi, step > 0 ? n : -1);
    List l;
    std::string s;
    for (int64_t k = b; step > 0 ? k < e : k > e; k += step) {
      if (a.kind == Value::Kind::List) l.push_back((*a.l)[std::size_t(k)]);
      else s += a.s[std::size_t(k)];
    }
    return a.kind == Value::Kind::List ? Value::list(std::move(l)) : Value::str(std::move(s));
  }

  std::vector<Value> eval_args(const Expr& e, std::size_t first) {
    std::vector<Value> out;
    for (std::size_t k = first; k < e.kids.size(); ++k) out.push_back(eval(*e.kids[k]));
    return out;
  }

  static bool test(const std::string& name, const Value& v, const std::vector<Value>& args) {
    using K = Value::Kind;
    if (name == "defined") return v.kind != K::Undefined;
    if (name == "undefined") return v.kind == K::Undefined;
    if (name == "none") return v.kind == K::None;
    if (name == "string") return v.kind == K::Str;
    if (name == "number") return v.kind == K::Int || v.kind == K::Float;
    if (name == "integer") return v.kind == K::Int;
    if (name == "float") return v.kind == K::Float;
    if (name == "boolean") return v.kind == K::Bool;
    if (name == "true") return v.kind == K::Bool && v.b;
    if (name == "false") return v.kind == K::Bool && !v.b;
    if (name == "mapping") return v.kind == K::Dict;
    if (name == "sequence" || name == "iterable") return v.kind == K::List || v.kind == K::Str || v.kind == K::Dict;
    if (name == "odd" || name == "even") {
      if (v.kind != K::Int) fail("'" + name + "' needs an integer");
      return (v.i % 2 != 0) == (name == "odd");
    }
    if (name == "equalto" || name == "eq" || name == "==" || name == "sameas") {
      if (args.size() != 1) fail("'" + name + "' takes one argument");
      return equal(v, args[0]);
    }
    if (name == "ne" || name == "!=") return args.size() == 1 && !equal(v, args[0]);
    fail("the test '" + name + "' is not supported");
  }

  Value filter(const std::string& name, const Value& v, const std::vector<Value>& args,
               const std::vector<std::string>& kw) {
    using K = Value::Kind;
    auto kwarg = [&](const char* key, std::size_t pos) -> const Value* {
      const std::size_t npos = args.size() - kw.size();
      for (std::size_t k = 0; k < kw.size(); ++k)
        if (kw[k] == key) return &args[npos + k];
      return pos < npos ? &args[pos] : nullptr;
    };
    if (name == "trim" || name == "strip") {
      const std::string s = to_str(v);
      const std::size_t b = s.find_first_not_of(" \t\r\n\f\v");
      if (b == std::string::npos) return Value::str("");
      return Value::str(s.substr(b, s.find_last_not_of(" \t\r\n\f\v") - b + 1));
    }
    if (name == "length" || name == "count") {
      if (v.kind == K::Str) return Value::integer(int64_t(v.s.size()));
      if (v.kind == K::List) return Value::integer(int64_t(v.l->size()));
      if (v.kind == K::Dict) return Value::integer(int64_t(v.d->size()));
      fail("'length' of " + repr(v));
    }
    if (name == "lower" || name == "upper") {
      std::string s = to_str(v);
      for (char& c : s) c = static_cast<char>(name == "lower" ? std::tolower(static_cast<unsigned char>(c)) : std::toupper(static_cast<unsigned char>(c)));
      return Value::str(s);
    }
    if (name == "capitalize") {
      std::string s = to_str(v);
      for (std::size_t k = 0; k < s.size(); ++k)
        s[k] = static_cast<char>(k ? std::tolower(static_cast<unsigned char>(s[k])) : std::toupper(static_cast<unsigned char>(s[k])));
      return Value::str(s);
    }
    if (name == "string") return Value::str(to_str(v));
    if (name == "safe" || name == "e" || name == "escape") {
      if (name != "safe") fail("the filter '" + name + "' is not supported");
      return v;
    }
    if (name == "int") {
      if (v.kind == K::Int) return v;
      if (v.kind == K::Float) return Value::integer(static_cast<int64_t>(v.f));
      if (v.kind == K::Str) {
        try {
          return Value::integer(std::stoll(v.s));
        } catch (...) {
          return Value::integer(0);
        }
      }
      return Value::integer(v.kind == K::Bool ? v.b : 0);
    }
    if (name == "tojson") {
      const Value* ind = kwarg("indent", 0);
      return Value::str(to_json(v, ind ? static_cast<int>(as_int(*ind, "indent")) : 0, 0));
    }
    if (name == "first" || name == "last") {
      if (v.kind == K::List) return v.l->empty() ? Value() : (name == "first" ? v.l->front() : v.l->back());
      if (v.kind == K::Str) return v.s.empty() ? Value() : Value::str(std::string(1, name == "first" ? v.s.front() : v.s.back()));
      fail("'" + name + "' of " + repr(v));
    }
    if (name == "join") {
      if (v.kind != K::List) fail("'join' needs a list");
      const Value* sep = kwarg("d", 0);
      std::string out;
      for (std::size_t k = 0; k < v.l->size(); ++k) out += (k && sep ? to_str(*sep) : "") + to_str((*v.l)[k]);
      return Value::str(out);
    }
    if (name == "default" || name == "d") {
      const Value* dflt = kwarg("default_value", 0);
      const Value* boolean = kwarg("boolean", 1);
      const bool use = v.kind == K::Undefined || (boolean && truthy(*boolean) && !truthy(v));
      return use ? (dflt ? *dflt : Value::str("")) : v;
    }
    if (name == "list") {
      if (v.kind == K::List) return v;
      List l;
      if (v.kind == K::Str)
        for (char c : v.s) l.push_back(Value::str(std::string(1, c)));
      else if (v.kind == K::Dict)
        for (const auto& kv : *v.d) l.push_back(Value::str(kv.first));
      else fail("'list' of " + repr(v));
      return Value::list(std::move(l));
    }
    if (name == "reverse") {
      if (v.kind == K::List) return Value::list(List(v.l->rbegin(), v.l->rend()));
      if (v.kind == K::Str) return Value::str(std::string(v.s.rbegin(), v.s.rend()));
      fail("'reverse' of " + repr(v));
    }
    if (name == "items") {
      if (v.kind != K::Dict) fail("'items' needs a mapping");
      List l;
      for (const auto& [k, x] : *v.d) l.push_back(Value::list({Value::str(k), x}));
      return Value::list(std::move(l));
    }
    if (name == "replace") {
      if (args.size() < 2) fail("'replace' takes two arguments");
      return Value::str(replace_all(to_str(v), to_str(args[0]), to_str(args[1])));
    }
    if (name == "selectattr" || name == "rejectattr") {
      if (v.kind != K::List) fail("'" + name + "' needs a list");
      if (args.empty()) fail("'" + name + "' needs an attribute name");
      List l;
      for (const Value& item : *v.l) {
        const Value* a = item.get(to_str(args[0]));
        const Value av = a ? *a : Value();
        const bool t = args.size() == 1 ? truthy(av)
                                        : test(to_str(args[1]), av, std::vector<Value>(args.begin() + 2, args.end()));
        if (t == (name == "selectattr")) l.push_back(item);
      }
      return Value::list(std::move(l));
    }
    if (name == "map") {
      const Value* attr = kwarg("attribute", 99);
      if (v.kind != K::List || !attr) fail("'map' is supported only as map(attribute=NAME)");
      List l;
      for (const Value& item : *v.l) {
        const Value* a = item.get(to_str(*attr));
        l.push_back(a ? *a : Value());
      }
      return Value::list(std::move(l));
    }
    fail("the filter '" + name + "' is not supported");
  }

  static std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    if (from.empty()) return s;
    std::string out;
    std::size_t p = 0;
    for (std::size_t at; (at = s.find(from, p)) != std::string::npos; p = at + from.size()) out += s.substr(p, at - p) + to;
    return out + s.substr(p);
  }

  Value method(const Value& self, const std::string& name, const std::vector<Value>& args) {
    using K = Value::Kind;
    if (self.kind == K::Str) {
      const std::string& s = self.s;
      auto chars = [&] { return args.empty() || args[0].kind == K::None ? std::string(" \t\r\n\f\v") : to_str(args[0]); };
      if (name == "strip" || name == "lstrip" || name == "rstrip") {
        const std::string cs = chars();
        std::size_t b = name == "rstrip" ? 0 : s.find_first_not_of(cs);
        if (b == std::string::npos) return Value::str("");
        std::size_t e = name == "lstrip" ? s.size() : s.find_last_not_of(cs) + 1;
        return Value::str(s.substr(b, e - b));
      }
      if (name == "startswith" || name == "endswith") {
        if (args.size() != 1) fail("'" + name + "' takes one argument");
        const std::string x = to_str(args[0]);
        const bool ok = x.size() <= s.size() &&
                        (name == "startswith" ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0);
        return Value::boolean(ok);
      }
      if (name == "lower" || name == "upper" || name == "capitalize") return filter(name, self, {}, {});
      if (name == "replace") return filter("replace", self, args, {});
      if (name == "split") {
        List l;
        if (args.empty() || args[0].kind == K::None) {
          std::istringstream in(s);
          for (std::string w; in >> w;) l.push_back(Value::str(w));
        } else {
          const std::string sep = to_str(args[0]);
          if (sep.empty()) fail("split with an empty separator");
          std::size_t p = 0;
          for (std::size_t at; (at = s.find(sep, p)) != std::string::npos; p = at + sep.size()) l.push_back(Value::str(s.substr(p, at - p)));
          l.push_back(Value::str(s.substr(p)));
        }
        return Value::list(std::move(l));
      }
    }
    if (self.kind == K::Dict) {
      if (name == "items") return filter("items", self, {}, {});
      if (name == "keys" || name == "values") {
        List l;
        for (const auto& [k, x] : *self.d) l.push_back(name == "keys" ? Value::str(k) : x);
        return Value::list(std::move(l));
      }
      if (name == "get") {
        if (args.empty()) fail("'get' needs a key");
        const Value* v = self.get(to_str(args[0]));
        return v ? *v : (args.size() > 1 ? args[1] : Value::none());
      }
    }
    fail("the method '" + name + "' is not supported on " + repr(self));
  }

  Value call(const Expr& e) {
    const Expr& target = *e.kids[0];
    std::vector<Value> args = eval_args(e, 1);
    if (target.k == Expr::K::Attr) return method(eval(*target.kids[0]), target.name, args);
    if (target.k != Expr::K::Var) fail("only named functions and methods can be called");
    const std::string& fn = target.name;
    if (fn == "raise_exception") throw Error(args.empty() ? "the chat template raised an exception" : to_str(args[0]));
    if (fn == "namespace") {
      const std::size_t npos = args.size() - e.kwnames.size();
      if (npos) fail("namespace() takes keyword arguments only");
      Dict d;
      for (std::size_t k = 0; k < e.kwnames.size(); ++k) d.emplace_back(e.kwnames[k], args[k]);
      return Value::dict(std::move(d));
    }
    if (fn == "range") {
      if (args.empty() || args.size() > 3) fail("range() takes 1 to 3 arguments");
      int64_t b = 0, en, st = 1;
      if (args.size() == 1) en = as_int(args[0], "range()'s argument");
      else {
        b = as_int(args[0], "range()'s argument");
        en = as_int(args[1], "range()'s argument");
        if (args.size() == 3) st = as_int(args[2], "range()'s step");
      }
      if (st == 0) fail("range() step cannot be zero");
      List l;
      for (int64_t k = b; st > 0 ? k < en : k > en;) {
        if (l.size() > 100000) fail("range() too long");
        l.push_back(Value::integer(k));
        if (__builtin_add_overflow(k, st, &k)) break;
      }
      return Value::list(std::move(l));
    }
    if (fn == "strftime_now") {
      if (args.size() != 1) fail("strftime_now() takes a format");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      gmtime_r(&now, &tm);
      char buf[256];
      const std::size_t n = std::strftime(buf, sizeof buf, to_str(args[0]).c_str(), &tm);
      return Value::str(std::string(buf, n));
    }
    fail("the function '" + fn + "' is not supported");
  }

  Value eval(const Expr& e) {
    using K = Value::Kind;
    switch (e.k) {
      case Expr::K::Lit: return e.lit;
      case Expr::K::Var: return lookup(e.name);
      case Expr::K::Attr: {
        Value a = eval(*e.kids[0]);
        const Value* v = a.get(e.name);
        return v ? *v : Value();
      }
      case Expr::K::Index: return index(eval(*e.kids[0]), eval(*e.kids[1]));
      case Expr::K::Slice: return slice(eval(*e.kids[0]), e.kids[1].get(), e.kids[2].get(), e.kids[3].get());
      case Expr::K::Call: return call(e);
      case Expr::K::Filter: return filter(e.name, eval(*e.kids[0]), eval_args(e, 1), e.kwnames);
      case Expr::K::Test: return Value::boolean(test(e.name, eval(*e.kids[0]), eval_args(e, 1)) != e.negate);
      case Expr::K::Cond: return truthy(eval(*e.kids[0])) ? eval(*e.kids[1]) : eval(*e.kids[2]);
      case Expr::K::ListLit: return Value::list(eval_args(e, 0));
      case Expr::K::DictLit: {
        Value d = Value::dict();
        for (std::size_t k = 0; k + 1 < e.kids.size(); k += 2) d.set(to_str(eval(*e.kids[k])), eval(*e.kids[k + 1]));
        return d;
      }
      case Expr::K::Unary: {
        Value a = eval(*e.kids[0]);
        if (e.name == "not") return Value::boolean(!truthy(a));
        if (!a.numeric()) fail("unary " + e.name + " of " + repr(a));
        if (e.name == "+") return a;
        if (a.kind == K::Float) return Value::number(-a.f);
        const int64_t x = as_int(a, "an operand");
        if (x == INT64_MIN) fail("integer overflow in unary -");
        return Value::integer(-x);
      }
      case Expr::K::Binary: break;
    }
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.kids[0]);
      return truthy(a) ? eval(*e.kids[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.kids[0]);
      return truthy(a) ? a : eval(*e.kids[1]);
    }
    const Value a = eval(*e.kids[0]), b = eval(*e.kids[1]);
    if (op == "~") return Value::str(to_str(a) + to_str(b));
    if (op == "==") return Value::boolean(equal(a, b));
    if (op == "!=") return Value::boolean(!equal(a, b));
    if (op == "in" || op == "not in") {
      bool found = false;
      if (b.kind == K::Str) found = b.s.find(to_str(a)) != std::string::npos;
      else if (b.kind == K::List) found = std::any_of(b.l->begin(), b.l->end(), [&](const Value& x) { return equal(a, x); });
      else if (b.kind == K::Dict) found = a.kind == K::Str && b.get(a.s) != nullptr;
      else if (b.kind != K::Undefined && b.kind != K::None) fail("'in' needs a string, list or mapping");
      return Value::boolean(found == (op == "in"));
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int c;
      if (a.numeric() && b.numeric()) c = a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double() ? 1 : 0;
      else if (a.kind == K::Str && b.kind == K::Str) c = a.s.compare(b.s) < 0 ? -1 : a.s == b.s ? 0 : 1;
      else fail("cannot compare " + repr(a) + " and " + repr(b));
      return Value::boolean(op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0);
    }
    if (op == "+") {
      if (a.kind == K::Str && b.kind == K::Str) return Value::str(a.s + b.s);
      if (a.kind == K::List && b.kind == K::List) {
        List l = *a.l;
        l.insert(l.end(), b.l->begin(), b.l->end());
        return Value::list(std::move(l));
      }
    }
    if (op == "*" && a.kind == K::Str && (b.kind == K::Int || b.kind == K::Bool)) {
      const int64_t times = as_int(b, "a repeat count");
      if (times > 0 && !a.s.empty() && static_cast<uint64_t>(times) > (uint64_t{1} << 24) / a.s.size())
        fail("string repetition too long");
      std::string out;
      for (int64_t k = 0; k < times; ++k) out += a.s;
      return Value::str(out);
    }
    if (!a.numeric() || !b.numeric()) fail("'" + op + "' of " + repr(a) + " and " + repr(b));
    const bool ints = a.kind != K::Float && b.kind != K::Float;
    if (op == "/") {
      if (b.as_double() == 0) fail("division by zero");
      return Value::number(a.as_double() / b.as_double());
    }
    if (ints) {
      const int64_t x = as_int(a, "an operand"), y = as_int(b, "an operand");
      int64_t r = 0;
      if (op == "+" || op == "-" || op == "*") {
        const bool over = op == "+" ? __builtin_add_overflow(x, y, &r)
                          : op == "-" ? __builtin_sub_overflow(x, y, &r)
                                      : __builtin_mul_overflow(x, y, &r);
        if (over) fail("integer overflow in '" + op + "'");
        return Value::integer(r);
      }
      if (y == 0) fail("division by zero");
      if (x == INT64_MIN && y == -1) fail("integer overflow in '" + op + "'");
      const int64_t q = x / y - ((x % y != 0) && ((x < 0) != (y < 0)) ? 1 : 0);  // Python's floor division
      if (op == "//") return Value::integer(q);
      if (op == "%") return Value::integer(x - q * y);
    } else {
      const double x = a.as_double(), y = b.as_double();
      if (op == "+") return Value::number(x + y);
      if (op == "-") return Value::number(x - y);
      if (op == "*") return Value::number(x * y);
      if (y == 0) fail("division by zero");
      if (op == "//") return Value::number(std::floor(x / y));
      if (op == "%") return Value::number(x - std::floor(x / y) * y);
    }
    fail("the operator '" + op + "' is not supported");
  }

  std::vector<std::map<std::string, Value>> scopes_;
  int64_t steps_ = 0;
};

}  // namespace

std::string render_chat_template(const std::string& source, const ChatTemplateInput& in) {
  const std::vector<Node> tree = TemplateParser(split_tags(source)).parse();
  Renderer r(in);
  std::string out;
  r.render(tree, out);
  return out;
}

}  // namespace parity::server
