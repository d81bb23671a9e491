#include "accuracy/module_pattern.h"

#include <algorithm>
#include <regex>
#include <set>

#include "common/error.h"

namespace parity::accuracy {
namespace {

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> parts;
  std::size_t from = 0;
  for (;;) {
    std::size_t dot = s.find('.', from);
    parts.push_back(s.substr(from, dot == std::string::npos ? std::string::npos : dot - from));
    if (dot == std::string::npos) return parts;
    from = dot + 1;
  }
}

std::string some_names(const std::vector<std::string>& available) {
  // Enough to show the naming scheme without flooding the terminal on a 64-layer model.
  std::string s;
  const std::size_t n = std::min<std::size_t>(available.size(), 8);
  for (std::size_t i = 0; i < n; ++i) s += (i ? ", " : "") + available[i];
  if (available.size() > n) s += ", … (" + std::to_string(available.size()) + " in all; `parity probes MODEL` lists them)";
  return s;
}

// Every name a pattern with "A-B" parts stands for (the pattern itself when it has none).
std::vector<std::string> expand_ranges(const std::string& pattern) {
  static const std::regex range(R"((\d+)-(\d+))");
  std::vector<std::string> out{""};
  bool first = true;
  for (const std::string& part : split_dots(pattern)) {
    std::smatch m;
    std::vector<std::string> alternatives;
    if (std::regex_match(part, m, range)) {
      const long lo = std::stol(m[1].str()), hi = std::stol(m[2].str());
      if (lo > hi) throw Error("module pattern '" + pattern + "': range " + part + " is empty (" + m[1].str() + " > " + m[2].str() + ")");
      if (hi - lo > 100000) throw Error("module pattern '" + pattern + "': range " + part + " is too large");
      for (long i = lo; i <= hi; ++i) alternatives.push_back(std::to_string(i));
    } else {
      alternatives.push_back(part);
    }
    std::vector<std::string> next;
    for (const std::string& prefix : out)
      for (const std::string& a : alternatives) next.push_back(first ? a : prefix + "." + a);
    out = std::move(next);
    first = false;
  }
  return out;
}

}  // namespace

std::vector<std::string> expand_module_patterns(const std::vector<std::string>& patterns,
                                                const std::vector<std::string>& available) {
  if (patterns.empty()) throw Error("no module pattern given (e.g. --modules backbone.layers.0-1.mixer lm_head)");
  const std::set<std::string> known(available.begin(), available.end());
  std::set<std::string> chosen;
  for (const std::string& p : patterns) {
    bool matched = false;
    if (p.rfind("re:", 0) == 0) {
      std::regex re;
      try {
        re = std::regex(p.substr(3), std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw Error("module pattern '" + p + "' is not a valid regular expression: " + e.what());
      }
      for (const std::string& n : available)
        if (std::regex_match(n, re)) chosen.insert(n), matched = true;
    } else {
      const std::vector<std::string> names = expand_ranges(p);
      for (const std::string& n : names) {
        if (!known.count(n)) {
          if (names.size() > 1)
            throw Error("module pattern '" + p + "' names " + n + ", which is not a probe point of this model; valid names: " +
                        some_names(available));
          break;
        }
        chosen.insert(n);
        matched = true;
      }
    }
    if (!matched)
      throw Error("module pattern '" + p + "' matches no probe point; valid names: " + some_names(available) +
                  " (a regular expression needs the prefix re:)");
  }
  std::vector<std::string> out;
  for (const std::string& n : available)
    if (chosen.count(n)) out.push_back(n);
  return out;
}

}  // namespace parity::accuracy
