#include "frontends/common/numerics_options.h"

#include "common/error.h"

namespace parity::frontends {

namespace {
std::optional<DType> cache_dtype_of(const std::string& s) {
  if (s.empty()) return std::nullopt;
  if (s == "float32") return DType::F32;
  if (s == "bfloat16") return DType::BF16;
  throw Error("--mamba-ssm-cache-dtype must be float32 or bfloat16, not '" + s + "'");
}
}  // namespace

void NumericsOptions::check() const {
  if (!exact && (exact_grid != -1 || stagger != "auto"))
    throw Error("--exact-grid and --exact-stagger choose exact mode's grid: add --exact (plain mode uses the model's "
                "chunk_size grid)");
  cache_dtype_of(cache_dtype);
  cache::parse_stagger(stagger);
  cache::validate_scan_products(exact, cache::parse_scan_products(scan_products));
  if (exact_grid != -1) cache::validate_exact_cell(exact_grid);
}

cache::Numerics NumericsOptions::resolve(int chunk_size, int default_cell) const {
  return cache::resolve_numerics(exact, cache_dtype_of(cache_dtype),
                                 exact_grid != -1 ? std::optional<int>(exact_grid) : std::nullopt,
                                 cache::parse_stagger(stagger), chunk_size, default_cell,
                                 cache::parse_scan_products(scan_products));
}

cache::Numerics NumericsOptions::resolve(const model::Model& m) const {
  return model::stamp_backend(m, resolve(m.chunk_size(), m.default_exact_cell()));
}

void NumericsOptions::apply(engine::EngineConfig& cfg) const {
  cfg.mode = exact ? model::ScanMode::Exact : model::ScanMode::Plain;
  cfg.ssm_cache_dtype = cache_dtype_of(cache_dtype);
  if (exact_grid != -1) cfg.exact_grid = exact_grid;
  cfg.exact_stagger = cache::parse_stagger(stagger);
  cfg.scan_products = cache::parse_scan_products(scan_products);
}

}  // namespace parity::frontends
