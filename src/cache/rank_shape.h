#pragma once
// What one tensor-parallel rank holds of the recurrent state and the KV cache
// (docs/tensor-parallel.md): 1/tp of every Mamba mixer's heads and groups (conv channels, SSM state,
// replay ring follow them) and 1/tp of the attention layers' KV heads. The model slices its weights
// the same way (model/tp_plan.h); the cache only needs the shapes.
#include "io/hf_config.h"
#include "kernels/exact_grid.h"

namespace parity::cache {

// The mixer shape of one rank: num_heads, n_groups and intermediate_size divided by tp. The split must
// keep whole groups on a rank (n_groups % tp == 0); parity::Error names n_groups and tp otherwise.
io::Mamba2Config rank_mamba_config(const io::Mamba2Config& whole, int tp);

// Rank `rank`'s exact grid: its heads keep the stagger offsets they have in the whole mixer.
kernels::ExactGrid rank_grid(const kernels::ExactGrid& whole, const io::Mamba2Config& whole_cfg, int rank, int tp);

}  // namespace parity::cache
