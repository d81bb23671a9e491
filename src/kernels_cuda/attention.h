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

#include <cuda_runtime_api.h>

#include "kernels/attention.h"
#include "kernels_cuda/ops.h"

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

// out [rows][ldo] = attention of q [rows][ldq] (num_heads · head_dim) over keys 0..position of the
// row's sequence, which must already be in the cache (kv_write first). Scale as kernels::attention.
void attention(const kernels::KvLayout& L, int num_heads, float scale, const float* q, int ldq, const PassSeqs& p,
               const KvTables& t, const float* k_cache, const float* v_cache, float* out, int ldo, cudaStream_t s);

}  // namespace parity::cuda
