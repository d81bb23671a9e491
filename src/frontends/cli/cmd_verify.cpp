// parity verify: the exact-replay phase-1 gate as a user tool. Exit 1 if exact mode mismatches.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "engine/exactness_gate.h"
#include "frontends/cli/commands.h"
#include "frontends/cli/engine_flags.h"
#include "kernels/isa.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace parity::cli {

Runner add_verify(CLI::App& app) {
  struct Opts {
    EngineFlags engine;  // the device and the MoE routing; the gate chooses its own numerics and limits
    std::string model = "builtin:tiny";
    int prompt_len = 0, forced_len = 0;
    uint64_t seed = 1;
    std::vector<std::string> scenarios;
    std::string cache_dtype = "both", stagger = "auto", scan_products = "float32";
    int exact_grid = -1;  // -1: the default
    bool prefix_caching = false;
  };
  auto o = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "verify", "Compare engine logits under many schedules with single-shot prefill, exact and plain mode");
  sub->add_option("model", o->model, "checkpoint folder or builtin:NAME (default builtin:tiny)");
  sub->add_option("--prompt-len", o->prompt_len, "P (default 600 × chunk/256)")->check(CLI::Range(2, 1 << 20));
  sub->add_option("--forced-len", o->forced_len, "K (default 300 × chunk/256)")->check(CLI::Range(1, 1 << 20));
  sub->add_option("--seed", o->seed, "token stream seed");
  sub->add_option("--scenario", o->scenarios, "run only these scenarios")
      ->check(CLI::IsMember(engine::gate_scenarios()));
  sub->add_option("--mamba-ssm-cache-dtype", o->cache_dtype, "exact mode's state dtype: float32, bfloat16 or both (default)")
      ->check(CLI::IsMember({"float32", "bfloat16", "both"}));
  sub->add_option("--exact-grid", o->exact_grid, "exact mode's grid cell (a power of two; default " +
                                                     std::to_string(kernels::kDefaultExactCell) + ")");
  sub->add_option("--exact-stagger", o->stagger, "auto | none | spread");
  sub->add_option("--scan-products", o->scan_products,
                  "exact mode's scan products: float32 (default), bfloat16 or split (--device cuda)");
  sub->add_flag("--enable-prefix-caching", o->prefix_caching,
                "run every scenario with prefix caching on (the prefix-cache scenario always has it)");
  add_engine_flags(sub, o->engine,
                   {.numerics = false, .serving = false, .max_num_batched_tokens = false, .max_num_seqs = false,
                    .max_model_len = false, .state_memory = false, .preempt = false, .threads = false,
                    .additional_config = false});
  return [o]() {
    const cache::StaggerChoice stagger = cache::parse_stagger(o->stagger);
    if (o->exact_grid != -1) cache::validate_exact_cell(o->exact_grid);
    const kernels::ScanProducts products = cache::parse_scan_products(o->scan_products);
    auto model = o->engine.load(o->model);
    engine::GateOptions g;
    g.prompt_len = o->prompt_len;
    g.forced_len = o->forced_len;
    g.seed = o->seed;
    g.scenarios = o->scenarios;
    g.stagger = stagger;
    g.scan_products = products;
    g.prefix_caching = o->prefix_caching;
    if (o->exact_grid != -1) g.exact_grid = o->exact_grid;
    if (o->cache_dtype == "float32") g.exact_dtypes = {DType::F32};
    if (o->cache_dtype == "bfloat16") g.exact_dtypes = {DType::BF16};
    const bool tty = isatty(fileno(stderr));
    auto progress = [tty](int done, int total, const std::string& what) {
      const int width = 30;
      int fill = total ? done * width / total : width;
      std::string bar(fill, '#');
      bar += std::string(width - fill, '.');
      std::fprintf(stderr, "%s[%s] %d/%d %-30s%s", tty ? "\r" : "", bar.c_str(), done, total, what.c_str(),
                   tty && done < total ? "" : "\n");
      std::fflush(stderr);
    };
    auto results = engine::run_exactness_gate(*model, g, progress);
    std::printf("model %s (%s), chunk %d, device %s, isa %s\n", model->origin().c_str(),
                model->architecture().c_str(), model->chunk_size(), model->device(),
                kernels::isa_name(kernels::detected_isa()));
    if (const std::string where = model->placement(); !where.empty()) std::printf("  %s\n", where.c_str());
    for (const auto& r : results)
      if (r.scenario == results.front().scenario) std::printf("  %s\n", r.numerics.describe().c_str());
    std::fputs(engine::format_gate_table(results).c_str(), stdout);
    int64_t bad = 0;
    for (const auto& r : results)
      if (r.mode == model::ScanMode::Exact) bad += r.all.mismatched;
    std::printf(bad == 0 ? "PASS: exact mode is bit-identical to single-shot prefill in every scenario\n"
                         : "FAIL: exact mode differs from single-shot prefill in %lld rows\n",
                (long long)bad);
    return bad == 0 ? 0 : 1;
  };
}

}  // namespace parity::cli
