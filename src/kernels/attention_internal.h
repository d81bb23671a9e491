#pragma once
// Private to the attention files: one task of the dispatcher (one query row, the heads that share
// one kv head) as the per-ISA kernels see it. Both kernels follow the order in attention.h.
#include <cstdint>

namespace parity::kernels::attn_detail {

inline constexpr int kMaxHeadDim = 512;

struct RowTask {
  const float* q;          // the group's first head; head i at q + i * head_dim
  float* out;              // same layout as q
  int heads;               // query heads in the group (num_heads / num_kv_heads)
  int head_dim;
  int kv_head;
  int block_size;
  int64_t block_floats;
  int64_t pos;             // absolute position of the query row
  float scale;
  const int* block_table;
  const float* k_cache;
  const float* v_cache;
};

// Per-ISA kernels; call only after kernels::active_isa() reports that instruction set.
void row_task_avx512(const RowTask& t);
void row_task_avx2(const RowTask& t);

}  // namespace parity::kernels::attn_detail
