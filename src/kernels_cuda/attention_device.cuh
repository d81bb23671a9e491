#pragma once
// Private to the attention kernels (attention.cu, attention_tiled.cu): the cache geometry, a row's
// position, and the contract's per-row steps that both kernels must perform identically.
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/math.h"
#include "kernels_cuda/attention.h"

namespace parity::cuda::attn {

constexpr int kKb = kernels::kAttnKeyBlock;  // 16: the contract's key block
constexpr int kMaxHd = 512;                 // kernels/attention_internal.h's kMaxHeadDim
static_assert(kKb == 16, "the block-sum trees are the 16-lane tree");

struct Geometry {
  int kv_heads, head_dim, block_size;
  int64_t block_floats;
};

__device__ inline int64_t row_position(const PassSeqs& p, int r, int* seq) {
  const int s = p.row_seq[r];
  *seq = s;
  return p.start[s] + (r - p.row0[s]);
}

// Keys of key block kb that a query at position pos sees (1..16).
__device__ inline int keys_in_block(int64_t kb, int64_t pos) {
  const int64_t c = pos - kb * kKb + 1;
  return static_cast<int>(c < kKb ? c : kKb);
}

// The running max after key block kb with block max mb (already + 0.0f), and the rescale factor
// of what came before (unused for kb = 0): kernels/attention.h's m' and α.
__device__ inline float next_max(int64_t kb, float m, float mb) { return kb == 0 ? mb : (mb > m ? mb : m); }
__device__ inline float rescale(int64_t kb, float m, float mn) { return kb == 0 ? 1.0f : kernels::exp_f(m - mn); }

// The tiled kernel (attention_tiled.cu): tiles of up to kAttnTileRows rows of one sequence.
constexpr int kTiledMaxHd = 128;
void launch_tiled(const Geometry& G, int num_heads, float scale, const float* q, int ldq, const PassSeqs& p,
                  const int32_t* tiles, int num_tiles, const KvTables& t, const float* kc, const float* vc, float* out,
                  int ldo, cudaStream_t s);

// The split decode kernels (attention_split.cu): the work's long rows.
void launch_split(const Geometry& G, int num_heads, float scale, const float* q, int ldq, const PassSeqs& p,
                  const AttnWork& work, const KvTables& t, const float* kc, const float* vc, float* out, int ldo,
                  cudaStream_t s);

}  // namespace parity::cuda::attn
