#pragma once
// What each tensor-parallel rank holds of a model (docs/tensor-parallel.md, "What each rank holds"):
//  Mamba2 in_proj by columns (the rank's heads' z, x, dt and its groups' B, C), conv1d, dt_bias, A, D and
//  the gated norm of its heads, out_proj by rows (a partial sum); attention q/k/v by KV heads, o_proj by
//  rows; MLP gate/up by columns, down by rows; MoE router replicated, every expert's gate/up by columns and
//  down by rows; embedding, norms and lm_head replicated. The rank-shaped spec is the whole spec with
//  those widths divided by tp; the splits say which rows or columns of each tensor a rank loads and
//  which probe points are sharded. A split that does not fit (a Mamba group cut in two, heads or widths
//  that tp does not divide) is refused with parity::Error naming the field and tp.
#include <map>
#include <string>

#include "io/hf_config.h"
#include "io/hybrid_spec.h"
#include "model/column_split.h"
#include "model/rank_checkpoint.h"

namespace parity::model {

struct TpPlan {
  TensorSplits tensors;
  std::map<std::string, ColumnSplit> probes;  // sharded probe points; every other point is replicated
};

TpPlan mamba2_tp_plan(const io::Mamba2Config& whole, int tp);

TpPlan hybrid_tp_plan(const io::HybridSpec& whole, int tp);
io::HybridSpec rank_hybrid_spec(const io::HybridSpec& whole, int tp);

}  // namespace parity::model
