#include "model/column_split.h"

#include <cstring>

namespace parity::model {

int64_t ColumnSplit::whole() const {
  int64_t n = 0;
  for (int64_t s : segments) n += s;
  return n;
}

int64_t ColumnSplit::local(int tp) const {
  int64_t n = 0;
  for (int64_t s : segments) n += s / tp;
  return n;
}

bool ColumnSplit::divides(int tp) const {
  for (int64_t s : segments)
    if (s % tp != 0) return false;
  return true;
}

void gather_columns(const ColumnSplit& split, int tp, const float* all, int rows, float* whole) {
  const std::size_t W = static_cast<std::size_t>(split.whole()), L = static_cast<std::size_t>(split.local(tp));
  for (int r = 0; r < tp; ++r) {
    const float* mine = all + std::size_t(r) * std::size_t(rows) * L;
    split.for_each_piece(r, tp, [&](int64_t at, int64_t from, int64_t w) {
      for (int t = 0; t < rows; ++t)
        std::memcpy(whole + std::size_t(t) * W + std::size_t(at), mine + std::size_t(t) * L + std::size_t(from),
                    std::size_t(w) * sizeof(float));
    });
  }
}

void take_columns(const ColumnSplit& split, int rank, int tp, const float* whole, int rows, float* mine) {
  const std::size_t W = static_cast<std::size_t>(split.whole()), L = static_cast<std::size_t>(split.local(tp));
  split.for_each_piece(rank, tp, [&](int64_t at, int64_t to, int64_t w) {
    for (int t = 0; t < rows; ++t)
      std::memcpy(mine + std::size_t(t) * L + std::size_t(to), whole + std::size_t(t) * W + std::size_t(at),
                  std::size_t(w) * sizeof(float));
  });
}

}  // namespace parity::model
