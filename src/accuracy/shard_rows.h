#pragma once
// Replacement tensors arrive unsharded ([T, E]); an injection point that holds only its rank's
// rows (sequence parallelism) takes rows [rank·T/ws, (rank+1)·T/ws). An uneven split is an error,
// not a silent truncation.
#include "accuracy/captures_file.h"

namespace parity::accuracy {

Matrix shard_rows(const Matrix& full, int rank, int world_size);

}  // namespace parity::accuracy
