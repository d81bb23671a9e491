#pragma once
// A tensor-parallel rank's view of a checkpoint: the same names, with each divided tensor cut to the
// rank's rows or columns (in the checkpoint's dtype, so widening and packing give the bits a whole
// load would). A rank's model is then loaded by the ordinary loaders from a rank-shaped spec, whose
// shape checks hold the cut to the spec.
#include <map>
#include <string>

#include "model/checkpoint.h"
#include "model/column_split.h"

namespace parity::model {

struct TensorSplit {
  int dim = 0;         // the dimension divided (0: output rows of a [out, in] weight; last: its input columns)
  ColumnSplit pieces;  // along dim
  // A bias added after a row-split projection: rank 0 keeps it, the others get zeros, so the ranks'
  // partial sums add up to one bias.
  bool rank_zero = false;
};

// name → split; tensors not named are replicated (every rank sees the whole tensor). A named tensor
// that the checkpoint lacks (an optional bias) stays absent.
using TensorSplits = std::map<std::string, TensorSplit>;

Checkpoint rank_checkpoint(const Checkpoint& whole, const TensorSplits& splits, int rank, int tp);

}  // namespace parity::model
