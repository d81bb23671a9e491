#pragma once
// How a tensor-parallel rank's columns sit in a whole tensor's: the whole width is a list of segments
// (in_proj's [z | x | B | C | dt], conv1d's [x | B | C], q_proj's heads), each divided into tp equal
// pieces, and rank r holds piece r of every segment, in segment order. Used for weights (the rows or
// columns a rank loads, model/rank_checkpoint.h) and for probe tensors (gathered to the whole width
// before a hook sees them, sliced again after a replacement, model/rank_probe_hooks.h).
#include <cstdint>
#include <vector>

namespace parity::model {

struct ColumnSplit {
  std::vector<int64_t> segments;  // whole widths, in order

  int64_t whole() const;
  int64_t local(int tp) const;  // what one rank holds: Σ segment / tp
  bool divides(int tp) const;   // every segment splits evenly
  // Calls f(whole_offset, local_offset, width) for every piece rank r holds, in order.
  template <typename F>
  void for_each_piece(int rank, int tp, F f) const {
    int64_t at = 0, mine = 0;
    for (int64_t s : segments) {
      const int64_t w = s / tp;
      f(at + rank * w, mine, w);
      at += s;
      mine += w;
    }
  }
};

// rows × whole row-major ← every rank's rows × local (all [tp][rows][local], rank order).
void gather_columns(const ColumnSplit& split, int tp, const float* all, int rows, float* whole);
// rows × local row-major ← rank r's columns of rows × whole.
void take_columns(const ColumnSplit& split, int rank, int tp, const float* whole, int rows, float* mine);

}  // namespace parity::model
