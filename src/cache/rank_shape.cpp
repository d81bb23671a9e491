#include "cache/rank_shape.h"

#include <string>

#include "common/error.h"

namespace parity::cache {

io::Mamba2Config rank_mamba_config(const io::Mamba2Config& whole, int tp) {
  if (tp < 1) throw Error("tensor parallel size must be at least 1, not " + std::to_string(tp));
  // The gated RMSNorm normalises per group and B/C belong to a group: a rank holds whole groups.
  if (whole.n_groups % tp != 0)
    throw Error("tensor parallel size " + std::to_string(tp) + " would cut a Mamba group: n_groups = " +
                std::to_string(whole.n_groups) + " is not a multiple of " + std::to_string(tp) +
                " (each rank must hold whole groups of the gated RMSNorm and their B/C; run this model at a "
                "tensor parallel size that divides n_groups)");
  if (whole.num_heads % tp != 0)
    throw Error("tensor parallel size " + std::to_string(tp) + " does not divide the Mamba heads (num_heads = " +
                std::to_string(whole.num_heads) + ")");
  io::Mamba2Config c = whole;
  c.num_heads /= tp;
  c.n_groups /= tp;
  c.intermediate_size = c.num_heads * c.head_dim;
  return c;
}

kernels::ExactGrid rank_grid(const kernels::ExactGrid& whole, const io::Mamba2Config& whole_cfg, int rank, int tp) {
  kernels::ExactGrid g = whole;
  g.nheads = whole_cfg.num_heads / tp;
  g.first_head = rank * g.nheads;
  g.model_heads = whole_cfg.num_heads;
  return g;
}

}  // namespace parity::cache
