#include "accuracy/shard_rows.h"

#include <string>

#include "common/error.h"

namespace parity::accuracy {

Matrix shard_rows(const Matrix& full, int rank, int world_size) {
  if (world_size < 1) throw Error("shard_rows: world_size must be at least 1, not " + std::to_string(world_size));
  if (rank < 0 || rank >= world_size)
    throw Error("shard_rows: rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world_size) + ")");
  if (full.rows % world_size != 0)
    throw Error("shard_rows: " + std::to_string(full.rows) + " rows do not split evenly over " +
                std::to_string(world_size) + " ranks");
  Matrix s;
  s.rows = full.rows / world_size;
  s.cols = full.cols;
  const auto begin = full.data.begin() + rank * s.rows * s.cols;
  s.data.assign(begin, begin + s.rows * s.cols);
  return s;
}

}  // namespace parity::accuracy
