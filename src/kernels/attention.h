#pragma once
// Causal GQA attention over a paged KV cache, and rotary position embeddings (HF convention).
//
// KV cache (one layer): physical blocks of `block_size` token slots. Block b starts at
// b · layout.block_floats() in both k_cache and v_cache and holds, per kv head g,
//   K: [g][head_dim][block_size]   (dimension-major: slot s of dim d at (g·head_dim + d)·block_size + s)
//   V: [g][block_size][head_dim]   (token-major:     dim d of slot s at (g·block_size + s)·head_dim + d)
// K is transposed so that 16 consecutive keys of one dimension are one vector load: the score
// kernel then runs 16 independent FMA chains over head_dim side by side, each in the order of the
// contract below. A sequence's block table maps logical block i (positions i·block_size …) to a
// physical block. block_size must be a positive multiple of kAttnKeyBlock.
//
// Contract (DESIGN.md rules 1–4). For a query row at absolute position p and head h (kv head
// g = h / (num_heads / num_kv_heads)), keys j = 0..p are visited in key blocks of kAttnKeyBlock
// = 16 positions anchored at 0: block b covers [16b, 16b + 15] ∩ [0, p], holding c keys.
//   score s_j  = (fma chain over d = 0..head_dim-1 of q[d]·k_j[d], from +0.0f) · scale
//   block max  mb = max_j s_j over the c keys, then mb + 0.0f (so −0 and +0 agree)
//   weights    e_j = exp_f(s_j − m') for the c keys, e_t = +0.0f for the 16 − c slots past p,
//              where m' = mb for b = 0 and max(m, mb) after (m the running max)
//   block sum  bs = 16-lane tree over e: t[i] += t[i+8] (i<8), t[i] += t[i+4] (i<4),
//              t[i] += t[i+2] (i<2), bs = t[0] + t[1]
//   first block:  l = bs;               acc[d] = fma chain over the c keys in order of e_j·v_j[d] from +0.0f
//   later blocks: α = exp_f(m − m'); l = l·α; l = l + bs; acc[d] = acc[d]·α, then the same fma chain
//   output     out[d] = acc[d] / l
// Keys past p are never read into any result: their scores are computed in discarded SIMD lanes
// at most, their values are not read at all. The operations for (q, p) are therefore the same
// whether the call holds one row (decode) or many (prefill, chunked prefill at any split), which
// physical blocks hold the keys, how many threads run, and which instruction set runs it.
// NaN or infinite inputs give unspecified (but non-crashing) results.
//
// RoPE (HF rotate_half convention, as GraniteMoeHybrid / Llama "default" rope):
//   inv_freq[i] = 1.0f / float(pow_d(theta, float(2i) / float(head_dim)))   i < head_dim / 2
//   angle       = float(position) · inv_freq[i]                      (one fp32 multiply)
//   x'[i]       = x[i]·cos(angle) − x[i + hd/2]·sin(angle)
//   x'[i+hd/2]  = x[i + hd/2]·cos(angle) + x[i]·sin(angle)           (products rounded, no FMA)
// This is the op sequence of HF (fp32 arange / dim, pow, reciprocal, position·inv_freq in fp32,
// q·cos + rotate_half(q)·sin), so the angle is bit-identical to HF's; only cos/sin come from
// trig.h (≤ ~0.5 ulp) instead of the library's. The fp32 angle is deliberately kept rather than an
// exact one: the model was trained on it, and at position 1e5 the two differ by up to ~5e-3 rad.
#include <cstdint>

namespace parity::kernels {

inline constexpr int kAttnKeyBlock = 16;

struct KvLayout {
  int num_kv_heads = 0;
  int head_dim = 0;
  int block_size = 0;
  // Floats per physical block in each of the K and V caches.
  int64_t block_floats() const { return int64_t(num_kv_heads) * head_dim * block_size; }
};

// Stores n tokens at positions start_pos .. start_pos + n - 1. k, v: [n][num_kv_heads · head_dim].
void kv_write(const KvLayout& layout, float* k_cache, float* v_cache, const int* block_table, int64_t start_pos,
              int n, const float* k, const float* v);

// One sequence's slice of a packed batch: query rows [row, row + n) of q / out sit at absolute
// positions start_pos .., and the keys 0 .. start_pos + n - 1 are already in the cache.
struct AttnSeq {
  int64_t row = 0;
  int n = 0;
  int64_t start_pos = 0;
  const int* block_table = nullptr;
};

// q, out: [rows][num_heads · head_dim]. Parallel over (query row, kv head) tasks of all sequences;
// the heads sharing a kv head are computed in one task, each exactly as the contract says.
void attention_varlen(const KvLayout& layout, int num_heads, float scale, const float* q, const AttnSeq* seqs,
                      int num_seqs, const float* k_cache, const float* v_cache, float* out);

// One sequence: query row i at position start_pos + i attends to keys 0 .. start_pos + i.
void attention(const KvLayout& layout, int num_heads, float scale, const float* q, int n, int64_t start_pos,
               const float* k_cache, const float* v_cache, const int* block_table, float* out);

// The plain scalar twin: single-threaded loops in the contract's order, reading keys through the
// block table one position at a time. key_block exists only so tests can show that another key
// block (a power of two ≤ 256) changes bits; everything else uses kAttnKeyBlock.
void attention_reference(const KvLayout& layout, int num_heads, float scale, const float* q, int n,
                         int64_t start_pos, const float* k_cache, const float* v_cache, const int* block_table,
                         float* out, int key_block = kAttnKeyBlock);

// inv_freq[0 .. head_dim/2) as above; compute once per model.
void rope_inv_freq(int head_dim, float theta, float* inv_freq);

// In place on x [n][heads · head_dim]; row i has absolute position positions[i].
void rope_apply_at(float* x, int n, int heads, int head_dim, const int64_t* positions, const float* inv_freq);

// Partial rotary (Bamba: partial_rotary_factor 0.5): only the first rotary_dim elements of each head rotate,
// paired (i, i + rotary_dim/2) with inv_freq from rope_inv_freq(rotary_dim, theta); the rest pass unchanged
// (HF's apply_rotary_pos_emb on q[..., :rotary_dim]). rotary_dim = head_dim is rope_apply_at.
void rope_apply_partial_at(float* x, int n, int heads, int head_dim, int rotary_dim, const int64_t* positions,
                           const float* inv_freq);

// Convenience: rows at start_pos, start_pos + 1, …; inv_freq computed from theta on every call.
void rope_apply(float* x, int n, int heads, int head_dim, int64_t start_pos, float theta);

}  // namespace parity::kernels
