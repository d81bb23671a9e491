// Paged causal GQA attention, RoPE and the KV append on the GPU, in kernels/attention.h's order.
//
// The row kernel here runs decode rows (and every row when no AttnPlan is given); tiles of
// prefill rows go to attention_tiled.cu, which performs the same operations per row.
//
// attention: one block of 128 threads per (query row, query head). Keys are taken in chunks of
// 128 (8 of the contract's 16-key blocks, anchored at position 0):
//   A  thread i computes the score of key c0 + i: one fmaf chain over d ascending from +0, times
//      scale (the CPU's chain; chains of different keys are independent, so 128 run side by side);
//   B  each half-warp is one 16-key block: its max by shuffles (exact, so order-free; then + 0.0f),
//      thread 0 walks the chunk's blocks in order for the running max m' and α = exp_f(m − m'),
//      every lane takes e = exp_f(s − m') (+0 past the row's position), and the half-warp sums e
//      by shfl_down 8, 4, 2, 1: exactly the contract's tree t[i] += t[i+8], += t[i+4], ...;
//   C  thread d (and d + 128, ...) walks the chunk's blocks in order: l = l·α + bs (two rounded
//      ops), acc = acc·α, then the fmaf chain over the block's keys in order.
// Nothing is split across blocks or combined by atomics: a query's operations depend only on its
// position, so decode, prefill and any batch give the same bits, and so does the CPU.
#include "kernels_cuda/attention.h"

#include <algorithm>

#include "kernels/math.h"
#include "kernels/trig.h"
#include "kernels_cuda/attention_device.cuh"
#include "kernels_cuda/cuda_check.h"

namespace parity::cuda {
namespace {

using namespace attn;
using kernels::exp_f;

constexpr int kThreads = 128;
constexpr int kChunk = kThreads;            // keys scored per step, one per thread
constexpr int kChunkBlocks = kChunk / kKb;  // 8
constexpr int kAccPerThread = kMaxHd / kThreads;

Geometry geometry(const kernels::KvLayout& L) {
  if (L.num_kv_heads <= 0 || L.head_dim <= 0 || L.head_dim > kMaxHd || L.block_size <= 0 || L.block_size % kKb != 0)
    throw Error("cuda attention: bad KV layout (head_dim must be 1..512, block_size a multiple of 16)");
  return {L.num_kv_heads, L.head_dim, L.block_size, L.block_floats()};
}

// One block per row: the row's sin/cos (double arithmetic of trig.h, once per frequency) shared
// by every head, then the rotation with rounded products, as kernels::rope_apply_at.
__global__ void rope_kernel(float* x, int ld, int heads, int head_dim, PassSeqs p, const float* inv_freq) {
  __shared__ float cs[kMaxHd / 2], sn[kMaxHd / 2];
  const int r = blockIdx.x, half = head_dim / 2;
  int seq;
  const float posf = static_cast<float>(row_position(p, r, &seq));
  for (int j = threadIdx.x; j < half; j += blockDim.x) kernels::sincos_f(posf * inv_freq[j], &sn[j], &cs[j]);
  __syncthreads();
  float* xr = x + static_cast<std::size_t>(r) * ld;
  for (int i = threadIdx.x; i < heads * half; i += blockDim.x) {
    const int h = i / half, j = i % half;
    float* xh = xr + static_cast<std::size_t>(h) * head_dim;
    const float x1 = xh[j], x2 = xh[j + half];
    xh[j] = x1 * cs[j] - x2 * sn[j];
    xh[j + half] = x2 * cs[j] + x1 * sn[j];
  }
}

__global__ void kv_write_kernel(Geometry G, float* kc, float* vc, KvTables t, PassSeqs p, const float* k,
                                const float* v, int ld) {
  const int r = blockIdx.x;
  int seq;
  const int64_t pos = row_position(p, r, &seq);
  const int64_t blk = t.tables[static_cast<std::size_t>(seq) * t.stride + pos / G.block_size];
  const int slot = static_cast<int>(pos % G.block_size);
  float* kb = kc + blk * G.block_floats;
  float* vb = vc + blk * G.block_floats;
  const float* kr = k + static_cast<std::size_t>(r) * ld;
  const float* vr = v + static_cast<std::size_t>(r) * ld;
  for (int i = threadIdx.x; i < G.kv_heads * G.head_dim; i += blockDim.x) {
    const int g = i / G.head_dim, d = i % G.head_dim;
    kb[(static_cast<int64_t>(g) * G.head_dim + d) * G.block_size + slot] = kr[i];
    vb[(static_cast<int64_t>(g) * G.block_size + slot) * G.head_dim + d] = vr[i];
  }
}

__global__ void __launch_bounds__(kThreads) attention_kernel(Geometry G, int num_heads, float scale, const float* q,
                                                             int ldq, PassSeqs p, KvTables t, const float* kc,
                                                             const float* vc, float* out, int ldo, const int32_t* rows) {
  __shared__ float qs[kMaxHd];
  __shared__ float es[kChunk];
  __shared__ float mb_s[kChunkBlocks], m_s[kChunkBlocks], alpha_s[kChunkBlocks], bsum_s[kChunkBlocks];
  // One 1-D grid, heads fastest: the heads sharing a kv head run side by side and read its keys
  // and values once from DRAM between them (L2), whatever the batch.
  const int item = static_cast<int>(blockIdx.x / num_heads), h = static_cast<int>(blockIdx.x % num_heads);
  const int r = rows ? rows[item] : item, tid = threadIdx.x, lane16 = tid % kKb, cb = tid / kKb;
  const int hd = G.head_dim, bs = G.block_size;
  const int g = h / (num_heads / G.kv_heads);
  int seq;
  const int64_t pos = row_position(p, r, &seq);
  const int32_t* table = t.tables + static_cast<std::size_t>(seq) * t.stride;
  const float* qr = q + static_cast<std::size_t>(r) * ldq + static_cast<std::size_t>(h) * hd;
  for (int d = tid; d < hd; d += kThreads) qs[d] = qr[d];
  __syncthreads();

  const int64_t nblocks = pos / kKb + 1;  // key blocks the row visits
  float acc[kAccPerThread];
  for (int i = 0; i < kAccPerThread; ++i) acc[i] = 0.0f;
  float m = 0.0f, l = 0.0f;
  for (int64_t c0 = 0; c0 <= pos; c0 += kChunk) {
    // A: this thread's key.
    const int64_t j = c0 + tid;
    const bool valid = j <= pos;
    float sc = -INFINITY;
    if (valid) {
      const int64_t blk = table[j / bs];
      const float* kp = kc + blk * G.block_floats + static_cast<int64_t>(g) * hd * bs + j % bs;
      float a = 0.0f;
      for (int d = 0; d < hd; ++d) a = fmaf(qs[d], kp[static_cast<int64_t>(d) * bs], a);
      sc = a * scale;
    }
    // B: block max over the valid keys (max is exact; + 0.0f makes −0 and +0 one value).
    float mx = sc;
    for (int o = kKb / 2; o >= 1; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane16 == 0) mb_s[cb] = mx + 0.0f;
    __syncthreads();
    const int64_t kb0 = c0 / kKb;  // global index of the chunk's first key block
    const int nb = static_cast<int>(nblocks - kb0 < kChunkBlocks ? nblocks - kb0 : kChunkBlocks);
    if (tid == 0) {
      float mm = m;
      for (int b = 0; b < nb; ++b) {
        const float mb = mb_s[b];
        const float mn = next_max(kb0 + b, mm, mb);
        alpha_s[b] = rescale(kb0 + b, mm, mn);
        m_s[b] = mn;
        mm = mn;
      }
    }
    __syncthreads();
    const float e = valid ? exp_f(sc - m_s[cb < nb ? cb : 0]) : 0.0f;
    es[tid] = e;
    float sum = e;
    for (int o = kKb / 2; o >= 1; o /= 2) sum = sum + __shfl_down_sync(0xffffffffu, sum, o);
    if (lane16 == 0) bsum_s[cb] = sum;
    __syncthreads();
    // C: the value chains, block by block in order.
    for (int b = 0; b < nb; ++b) {
      const int64_t kb = kb0 + b, pos0 = kb * kKb;
      const int c = keys_in_block(kb, pos);
      const int64_t blk = table[pos0 / bs];
      const float* vp = vc + blk * G.block_floats + (static_cast<int64_t>(g) * bs + pos0 % bs) * hd;
      const float alpha = alpha_s[b];
      if (kb == 0) {
        l = bsum_s[b];
      } else {
        l = l * alpha;
        l = l + bsum_s[b];
      }
      for (int i = 0; i < kAccPerThread; ++i) {
        const int d = tid + i * kThreads;
        if (d >= hd) break;
        float a = kb == 0 ? 0.0f : acc[i] * alpha;
        for (int k = 0; k < c; ++k) a = fmaf(es[b * kKb + k], vp[static_cast<int64_t>(k) * hd + d], a);
        acc[i] = a;
      }
      m = m_s[b];
    }
    __syncthreads();  // the shared arrays are refilled by the next chunk
  }
  float* o = out + static_cast<std::size_t>(r) * ldo + static_cast<std::size_t>(h) * hd;
  for (int i = 0; i < kAccPerThread; ++i) {
    const int d = tid + i * kThreads;
    if (d < hd) o[d] = acc[i] / l;
  }
}

}  // namespace

void rope(float* x, int ld, int heads, int head_dim, const PassSeqs& p, const float* inv_freq, cudaStream_t s) {
  if (p.num_rows <= 0) return;
  if (head_dim <= 0 || head_dim % 2 != 0 || head_dim > kMaxHd) throw Error("cuda rope: head_dim must be even, <= 512");
  rope_kernel<<<p.num_rows, 128, 0, s>>>(x, ld, heads, head_dim, p, inv_freq);
  check_launch("rope");
}

void kv_write(const kernels::KvLayout& L, float* k_cache, float* v_cache, const KvTables& t, const PassSeqs& p,
              const float* k, const float* v, int ld, cudaStream_t s) {
  if (p.num_rows <= 0) return;
  kv_write_kernel<<<p.num_rows, 256, 0, s>>>(geometry(L), k_cache, v_cache, t, p, k, v, ld);
  check_launch("kv_write");
}

void attention(const kernels::KvLayout& L, int num_heads, float scale, const float* q, int ldq, const PassSeqs& p,
               const KvTables& t, const float* k_cache, const float* v_cache, float* out, int ldo, cudaStream_t s,
               const AttnWork& work) {
  if (p.num_rows <= 0) return;
  const Geometry G = geometry(L);
  if (num_heads <= 0 || num_heads % G.kv_heads != 0) throw Error("cuda attention: query heads not a multiple of kv heads");
  const bool planned = work.num_tiles + work.num_rows + work.num_long > 0 && G.head_dim <= kTiledMaxHd;
  if (!planned) {
    attention_kernel<<<static_cast<unsigned>(p.num_rows) * num_heads, kThreads, 0, s>>>(G, num_heads, scale, q, ldq, p, t, k_cache,
                                                                      v_cache, out, ldo, nullptr);
    check_launch("attention");
    return;
  }
  if (work.num_rows > 0) {
    attention_kernel<<<static_cast<unsigned>(work.num_rows) * num_heads, kThreads, 0, s>>>(G, num_heads, scale, q, ldq, p, t, k_cache,
                                                                         v_cache, out, ldo, work.rows);
    check_launch("attention rows");
  }
  if (work.num_tiles > 0)
    launch_tiled(G, num_heads, scale, q, ldq, p, work.tiles, work.num_tiles, t, k_cache, v_cache, out, ldo, s);
  if (work.num_long > 0)
    launch_split(G, num_heads, scale, q, ldq, p, work, t, k_cache, v_cache, out, ldo, s);
}

AttnPlan::AttnPlan(const std::vector<SeqSpan>& seqs, int num_heads, int split_min_keys) {
  std::vector<int32_t> rows, longs;
  int row0 = 0, candidates = 0;
  for (const SeqSpan& q : seqs)
    if (q.n == 1 && q.start + 1 >= split_min_keys) {
      scratch_floats_ += split_floats(q.start, num_heads);
      ++candidates;
    }
  // Split only while the scratch stays small (and the rows fit a grid dimension): many long
  // decode rows fill the GPU on their own.
  const bool split = candidates > 0 && candidates <= 65535 && scratch_floats_ <= kAttnSplitMaxFloats;
  int64_t off = 0;
  for (std::size_t s = 0; s < seqs.size(); ++s) {
    const SeqSpan& q = seqs[s];
    if (q.n == 1 && split && q.start + 1 >= split_min_keys) {
      longs.push_back(row0);
      longs.push_back(static_cast<int32_t>(off));
      off += split_floats(q.start, num_heads);
      long_max_keys_ = std::max(long_max_keys_, static_cast<int>(q.start + 1));
    } else if (q.n == 1) {
      rows.push_back(row0);
    } else {
      for (int i = 0; i < q.n; i += kAttnTileRows, ++num_tiles_) {
        ints_.push_back(static_cast<int32_t>(s));
        ints_.push_back(i);
      }
    }
    row0 += q.n;
  }
  if (!split) scratch_floats_ = 0;
  num_rows_ = static_cast<int>(rows.size());
  num_long_ = static_cast<int>(longs.size() / 2);
  ints_.insert(ints_.end(), rows.begin(), rows.end());
  ints_.insert(ints_.end(), longs.begin(), longs.end());
}

AttnWork AttnPlan::upload(DeviceBuffer<int32_t>& buf, DeviceBuffer<float>& scratch) const {
  if (ints_.empty()) return {};
  buf.upload(ints_);
  return view(buf, scratch);
}

AttnWork AttnPlan::upload(DeviceBuffer<int32_t>& buf, DeviceBuffer<float>& scratch, PinnedBuffer<int32_t>& staging,
                          cudaStream_t s) const {
  if (ints_.empty()) return {};
  upload_async(ints_, staging, buf, s);
  return view(buf, scratch);
}

AttnWork AttnPlan::view(const DeviceBuffer<int32_t>& buf, DeviceBuffer<float>& scratch) const {
  AttnWork w;
  w.tiles = buf.data();
  w.num_tiles = num_tiles_;
  w.rows = buf.data() + 2 * num_tiles_;
  w.num_rows = num_rows_;
  w.long_rows = w.rows + num_rows_;
  w.num_long = num_long_;
  w.long_max_keys = long_max_keys_;
  if (num_long_ > 0) {
    scratch.resize(static_cast<std::size_t>(scratch_floats_));
    w.scratch = scratch.data();
  }
  return w;
}

}  // namespace parity::cuda
