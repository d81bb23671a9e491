#include "frontends/cli/numerics_flags.h"

#include "common/error.h"

namespace parity::cli {

namespace {
std::optional<DType> cache_dtype_of(const std::string& s) {
  if (s.empty()) return std::nullopt;
  if (s == "float32") return DType::F32;
  if (s == "bfloat16") return DType::BF16;
  throw Error("--mamba-ssm-cache-dtype must be float32 or bfloat16, not '" + s + "'");
}
}  // namespace

void add_numerics_flags(CLI::App* sub, NumericsFlags& f) {
  sub->add_flag("--exact,--mamba-exact-replay", f.exact,
                "exact mode: logits bit-identical under any schedule (--mamba-exact-replay is the RFC's name)");
  sub->add_option("--mamba-ssm-cache-dtype", f.cache_dtype,
                  "float32 | bfloat16 (default: bfloat16 plain, float32 exact); exact mode rounds a bfloat16 "
                  "state at every grid boundary");
  sub->add_option("--exact-grid", f.exact_grid,
                  "exact mode's SSD grid cell in rows, a power of two (default " +
                      std::to_string(kernels::kDefaultExactCell) + "; the model's chunk_size gives the RFC's layout)");
  sub->add_option("--exact-stagger", f.stagger,
                  "per-head grid offsets: auto (spread unless the grid is the chunk size), none, spread");
}

void NumericsFlags::check() const {
  if (!exact && (exact_grid != -1 || stagger != "auto"))
    throw Error("--exact-grid and --exact-stagger choose exact mode's grid: add --exact (plain mode uses the model's "
                "chunk_size grid)");
  cache_dtype_of(cache_dtype);
  cache::parse_stagger(stagger);
  if (exact_grid != -1) cache::validate_exact_cell(exact_grid);
}

cache::Numerics NumericsFlags::resolve(int chunk_size, int default_cell) const {
  return cache::resolve_numerics(exact, cache_dtype_of(cache_dtype),
                                 exact_grid != -1 ? std::optional<int>(exact_grid) : std::nullopt,
                                 cache::parse_stagger(stagger), chunk_size, default_cell);
}

void NumericsFlags::apply(engine::EngineConfig& cfg) const {
  cfg.mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  cfg.ssm_cache_dtype = cache_dtype_of(cache_dtype);
  if (exact_grid != -1) cfg.exact_grid = exact_grid;
  cfg.exact_stagger = cache::parse_stagger(stagger);
}

}  // namespace parity::cli
