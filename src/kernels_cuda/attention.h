#pragma once
// The CUDA twins of kernels/attention.h: RoPE, the KV append into the paged cache, and causal GQA
// attention over it, for a pass's packed rows (PassSeqs). The device cache has the CPU's layout
// (kernels/attention.h: K dimension-major, V token-major per physical block), and every output
// follows the CPU contract's operation order exactly: 16-key blocks anchored at position 0, the
// same fma chains, the same online-softmax rescaling block by block, exp_f from kernels/math.h and
// the RoPE angle / sin / cos of kernels/trig.h. With --fmad=false the GPU's bits are the CPU's
// (tests/cuda/cuda_attention_test.cpp checks bit equality), and a row's bits depend only on its
// position and the keys 0..position, never on the batch or on decode versus prefill.
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/attention.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/pass_plan.h"

namespace parity::cuda {

// Block tables of the pass's sequences: sequence s (PassSeqs order) maps logical block i to
// physical block tables[s · stride + i].
struct KvTables {
  const int32_t* tables = nullptr;
  int stride = 0;
};

// In place on x [rows][ld] (heads · head_dim used per row); row r sits at its sequence's absolute
// position (p.start + r − p.row0). inv_freq [head_dim/2] from kernels::rope_inv_freq.
void rope(float* x, int ld, int heads, int head_dim, const PassSeqs& p, const float* inv_freq, cudaStream_t s);

// Stores every row's K and V ([rows][ld], kv heads · head_dim used) at its position in the cache.
void kv_write(const kernels::KvLayout& L, float* k_cache, float* v_cache, const KvTables& t, const PassSeqs& p,
              const float* k, const float* v, int ld, cudaStream_t s);

// How a pass's rows are shared out. Rows of a sequence with several rows in the pass go in tiles
// of up to kAttnTileRows consecutive rows (one block per tile and head, keys staged once in shared
// memory for the tile; attention_tiled.cu); one-row sequences (decode) get a block each, except
// few decode rows over long contexts, whose scores, maxes and weights are computed by many blocks
// side by side before one pass per 32 dimensions walks the value chain (attention_split.cu). All
// three give a row the same operations, so which one ran never shows in the bits. The default
// (no plan) runs every row alone: right for decode, slow for long prefills.
inline constexpr int kAttnTileRows = 16;
inline constexpr int kAttnSplitMinKeys = 1024;     // decode rows with at least this many keys ...
inline constexpr int64_t kAttnSplitMaxFloats = int64_t(1) << 25;  // ... while their scratch fits
struct AttnWork {
  const int32_t* tiles = nullptr;  // [num_tiles][2]: (sequence, first row within the sequence)
  int num_tiles = 0;
  const int32_t* rows = nullptr;   // [num_rows]: packed rows computed alone
  int num_rows = 0;
  const int32_t* long_rows = nullptr;  // [num_long][2]: (packed row, scratch offset in floats)
  int num_long = 0;
  int long_max_keys = 0;  // the most keys a long row sees
  float* scratch = nullptr;
};
class AttnPlan {
 public:
  // num_heads: query heads (sizes the long rows' scratch); split_min_keys: tests lower it so that
  // short decode rows take the split path too.
  AttnPlan(const std::vector<SeqSpan>& seqs, int num_heads, int split_min_keys = kAttnSplitMinKeys);
  AttnWork upload(DeviceBuffer<int32_t>& buf, DeviceBuffer<float>& scratch) const;
  // The same, queued on s through pinned staging (the models' path: no host wait).
  AttnWork upload(DeviceBuffer<int32_t>& buf, DeviceBuffer<float>& scratch, PinnedBuffer<int32_t>& staging,
                  cudaStream_t s) const;
  // Floats of scratch a long row at `pos` needs: per head, its key blocks' 16 weights and 3 stats.
  static int64_t split_floats(int64_t pos, int num_heads) { return int64_t(num_heads) * (pos / 16 + 1) * (16 + 3); }
  int num_tiles() const { return num_tiles_; }
  int num_rows() const { return num_rows_; }
  int num_long() const { return num_long_; }

 private:
  AttnWork view(const DeviceBuffer<int32_t>& buf, DeviceBuffer<float>& scratch) const;

  std::vector<int32_t> ints_;  // tiles, rows, long rows
  int num_tiles_ = 0, num_rows_ = 0, num_long_ = 0, long_max_keys_ = 0;
  int64_t scratch_floats_ = 0;
};

// out [rows][ldo] = attention of q [rows][ldq] (num_heads · head_dim) over keys 0..position of the
// row's sequence, which must already be in the cache (kv_write first). Scale as kernels::attention.
void attention(const kernels::KvLayout& L, int num_heads, float scale, const float* q, int ldq, const PassSeqs& p,
               const KvTables& t, const float* k_cache, const float* v_cache, float* out, int ldo, cudaStream_t s,
               const AttnWork& work = {});

}  // namespace parity::cuda
