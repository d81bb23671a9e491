#include "frontends/cli/numerics_flags.h"

#include <string>

#include "kernels/exact_grid.h"

namespace parity::cli {

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
  sub->add_option("--scan-products", f.scan_products,
                  "exact mode's scan products: float32 (default), bfloat16 or split (hi + lo bf16), the latter two on "
                  "--device cuda's tensor cores, fp32 accumulation either way (docs/exact-mode.md)");
}

}  // namespace parity::cli
