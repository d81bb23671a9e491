// parity compare A B: where two captures files part (module by module, position by position).
// Exit status 1 when some module parts beyond the tolerance, so scripts can gate on it.
#include <cstdio>
#include <memory>
#include <string>

#include "accuracy/compare.h"
#include "accuracy/compare_report.h"
#include "cache/numerics.h"
#include "frontends/cli/commands.h"
#include "io/file_util.h"

namespace parity::cli {

Runner add_compare(CLI::App& app) {
  struct Opts {
    std::string a, b, html, json;
    double atol = 0.0, rtol = 0.0;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand("compare", "Compare two captures files; report the first module where they part");
  sub->add_option("a", o->a, "captures file A")->required();
  sub->add_option("b", o->b, "captures file B (the reference: e.g. Hugging Face)")->required();
  sub->add_option("--atol", o->atol, "absolute tolerance per row (default 0: any difference parts)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--rtol", o->rtol, "relative tolerance per row, times max(|A|, |B|) of the row (default 0)")
      ->check(CLI::NonNegativeNumber);
  sub->add_option("--html", o->html, "write a self-contained HTML report");
  sub->add_option("--json", o->json, "write every row's errors as JSON");
  return [o]() {
    const accuracy::Captures a = accuracy::read_captures(o->a);
    const accuracy::Captures b = accuracy::read_captures(o->b);
    const accuracy::CompareResult r = accuracy::compare_captures(a, b, {o->atol, o->rtol});
    // Exact-mode bits are promised for one numerics identity: a difference in it explains a diff.
    const std::string numerics = cache::numerics_difference(a.metadata, b.metadata);
    if (!numerics.empty()) std::printf("note: the files were made with different numerics: %s\n", numerics.c_str());
    if (!o->html.empty()) {
      const std::string page = accuracy::compare_html(r, o->a, o->b);
      io::write_file_atomic(o->html, {page});
    }
    if (!o->json.empty()) {
      nlohmann::json j = accuracy::compare_json(r, o->a, o->b);
      if (!numerics.empty()) j["numerics_difference"] = numerics;
      const std::string text = j.dump(1) + "\n";
      io::write_file_atomic(o->json, {text});
    }
    std::fputs(accuracy::compare_table(r).c_str(), stdout);
    return r.first ? 1 : 0;
  };
}

}  // namespace parity::cli
