// Paged causal GQA attention (the order is defined in attention.h), its scalar twin, KV writes and
// RoPE. Several implementations of the one order exist on purpose: the reference (key by key
// through the block table, any key block), the portable task kernel below (16-key blocks read from
// a physical block, as the SIMD kernels read them), attention_avx2.cpp and attention_avx512.cpp;
// the tests hold them all to the same bits.
#include "kernels/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/attention_internal.h"
#include "kernels/isa.h"
#include "kernels/math.h"
#include "kernels/trig.h"

namespace parity::kernels {

using attn_detail::RowTask;

namespace {

constexpr int kKb = kAttnKeyBlock;

void check_layout(const KvLayout& L, const char* what) {
  if (L.num_kv_heads <= 0 || L.head_dim <= 0 || L.head_dim > attn_detail::kMaxHeadDim || L.block_size <= 0 ||
      L.block_size % kKb != 0) {
    throw Error(std::string(what) + ": bad KV layout (kv heads " + std::to_string(L.num_kv_heads) + ", head_dim " +
                std::to_string(L.head_dim) + " must be 1.." + std::to_string(attn_detail::kMaxHeadDim) +
                ", block_size " + std::to_string(L.block_size) + " must be a positive multiple of " +
                std::to_string(kKb) + ")");
  }
}

void check_heads(const KvLayout& L, int num_heads, const char* what) {
  if (num_heads <= 0 || num_heads % L.num_kv_heads != 0) {
    throw Error(std::string(what) + ": " + std::to_string(num_heads) + " query heads are not a multiple of " +
                std::to_string(L.num_kv_heads) + " kv heads");
  }
}

// The block-sum tree of the contract over `w` lanes (w a power of two); lanes are summed in place.
float tree_sum(float* t, int w) {
  for (int h = w / 2; h >= 1; h /= 2) {
    for (int i = 0; i < h; ++i) t[i] = t[i] + t[i + h];
  }
  return t[0];
}

// One query head against its keys, 16-key blocks read straight from the physical blocks.
void head_portable(const RowTask& T, const float* q, float* out, float* acc) {
  const int hd = T.head_dim, bs = T.block_size;
  const int64_t p = T.pos;
  const int64_t nblocks = p / kKb + 1;
  float m = 0.0f, l = 0.0f;
  for (int64_t kb = 0; kb < nblocks; ++kb) {
    const int64_t pos0 = kb * kKb;
    const int64_t blk = T.block_table[pos0 / bs];
    const int slot0 = static_cast<int>(pos0 % bs);
    const int c = static_cast<int>(std::min<int64_t>(kKb, p - pos0 + 1));
    const float* kp = T.k_cache + blk * T.block_floats + int64_t(T.kv_head) * hd * bs + slot0;
    const float* vp = T.v_cache + blk * T.block_floats + (int64_t(T.kv_head) * bs + slot0) * hd;
    float s[kKb] = {};
    for (int t = 0; t < c; ++t) {
      float a = 0.0f;
      for (int d = 0; d < hd; ++d) a = std::fma(q[d], kp[int64_t(d) * bs + t], a);
      s[t] = a * T.scale;
    }
    float mb = s[0];
    for (int t = 1; t < c; ++t) mb = s[t] > mb ? s[t] : mb;
    mb = mb + 0.0f;
    const float mn = kb == 0 ? mb : (mb > m ? mb : m);
    float e[kKb] = {};
    for (int t = 0; t < c; ++t) e[t] = exp_f(s[t] - mn);
    float ev[kKb];
    std::copy(e, e + kKb, ev);
    const float bsum = tree_sum(ev, kKb);
    if (kb == 0) {
      l = bsum;
      std::fill(acc, acc + hd, 0.0f);
    } else {
      const float alpha = exp_f(m - mn);
      l = l * alpha;
      l = l + bsum;
      for (int d = 0; d < hd; ++d) acc[d] = acc[d] * alpha;
    }
    for (int t = 0; t < c; ++t) {
      const float* vr = vp + int64_t(t) * hd;
      for (int d = 0; d < hd; ++d) acc[d] = std::fma(e[t], vr[d], acc[d]);
    }
    m = mn;
  }
  for (int d = 0; d < hd; ++d) out[d] = acc[d] / l;
}

void row_task_portable(const RowTask& T) {
  float acc[attn_detail::kMaxHeadDim];
  for (int h = 0; h < T.heads; ++h) {
    head_portable(T, T.q + int64_t(h) * T.head_dim, T.out + int64_t(h) * T.head_dim, acc);
  }
}

}  // namespace

void kv_write(const KvLayout& L, float* k_cache, float* v_cache, const int* block_table, int64_t start_pos, int n,
              const float* k, const float* v) {
  check_layout(L, "kv_write");
  const int hd = L.head_dim, bs = L.block_size, kvh = L.num_kv_heads;
  const int64_t ld = int64_t(kvh) * hd;
  for (int i = 0; i < n; ++i) {
    const int64_t pos = start_pos + i;
    const int64_t blk = block_table[pos / bs];
    const int slot = static_cast<int>(pos % bs);
    float* kb = k_cache + blk * L.block_floats();
    float* vb = v_cache + blk * L.block_floats();
    for (int g = 0; g < kvh; ++g) {
      const float* kr = k + i * ld + int64_t(g) * hd;
      const float* vr = v + i * ld + int64_t(g) * hd;
      float* kd = kb + int64_t(g) * hd * bs + slot;
      for (int d = 0; d < hd; ++d) kd[int64_t(d) * bs] = kr[d];
      std::copy(vr, vr + hd, vb + (int64_t(g) * bs + slot) * hd);
    }
  }
}

void attention_varlen(const KvLayout& L, int num_heads, float scale, const float* q, const AttnSeq* seqs,
                      int num_seqs, const float* k_cache, const float* v_cache, float* out) {
  check_layout(L, "attention");
  check_heads(L, num_heads, "attention");
  const int kvh = L.num_kv_heads, hd = L.head_dim, group = num_heads / kvh;
  const int64_t ld = int64_t(num_heads) * hd;
  // Task t of sequence s is (row t / kvh, kv head t % kvh); first[s] is its first global task.
  std::vector<int64_t> first(num_seqs + 1, 0);
  double work = 0;  // score + value FMAs, to decide whether a thread team pays off
  for (int s = 0; s < num_seqs; ++s) {
    first[s + 1] = first[s] + int64_t(seqs[s].n) * kvh;
    work += double(seqs[s].n) * (double(seqs[s].start_pos) + 0.5 * seqs[s].n) * 2.0 * hd * num_heads;
  }
  const int64_t total = first[num_seqs];
  if (total == 0) return;
  void (*task_fn)(const RowTask&) = row_task_portable;
  switch (active_isa()) {
    case Isa::Avx512: task_fn = attn_detail::row_task_avx512; break;
    case Isa::Avx2: task_fn = attn_detail::row_task_avx2; break;
    case Isa::Portable: break;
  }
  const int nt = num_threads();
  // Later rows cost more, so tasks run from the last one back (better balance, same bits).
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) if (nt > 1 && total > 1 && (work >= 2e5 || force_parallel()))
  for (int64_t it = 0; it < total; ++it) {
    const int64_t t = total - 1 - it;
    const int s = static_cast<int>(std::upper_bound(first.begin(), first.end(), t) - first.begin()) - 1;
    const int64_t local = t - first[s];
    const int64_t row = local / kvh;
    const int g = static_cast<int>(local % kvh);
    const AttnSeq& sq = seqs[s];
    const int64_t r = sq.row + row;
    RowTask T;
    T.q = q + r * ld + int64_t(g) * group * hd;
    T.out = out + r * ld + int64_t(g) * group * hd;
    T.heads = group;
    T.head_dim = hd;
    T.kv_head = g;
    T.block_size = L.block_size;
    T.block_floats = L.block_floats();
    T.pos = sq.start_pos + row;
    T.scale = scale;
    T.block_table = sq.block_table;
    T.k_cache = k_cache;
    T.v_cache = v_cache;
    task_fn(T);
  }
}

void attention(const KvLayout& L, int num_heads, float scale, const float* q, int n, int64_t start_pos,
               const float* k_cache, const float* v_cache, const int* block_table, float* out) {
  const AttnSeq s{0, n, start_pos, block_table};
  attention_varlen(L, num_heads, scale, q, &s, 1, k_cache, v_cache, out);
}

void attention_reference(const KvLayout& L, int num_heads, float scale, const float* q, int n, int64_t start_pos,
                         const float* k_cache, const float* v_cache, const int* block_table, float* out,
                         int key_block) {
  check_layout(L, "attention_reference");
  check_heads(L, num_heads, "attention_reference");
  if (key_block < 1 || key_block > 256 || (key_block & (key_block - 1)) != 0) {
    throw Error("attention_reference: key block " + std::to_string(key_block) + " is not a power of two <= 256");
  }
  const int kvh = L.num_kv_heads, hd = L.head_dim, bs = L.block_size, group = num_heads / kvh;
  const int64_t bf = L.block_floats();
  auto key = [&](int64_t j, int g, int d) {
    return k_cache[int64_t(block_table[j / bs]) * bf + (int64_t(g) * hd + d) * bs + j % bs];
  };
  auto value = [&](int64_t j, int g, int d) {
    return v_cache[int64_t(block_table[j / bs]) * bf + (int64_t(g) * bs + j % bs) * hd + d];
  };
  std::vector<float> s(key_block), e(key_block), lanes(key_block), acc(hd);
  for (int i = 0; i < n; ++i) {
    const int64_t p = start_pos + i;
    for (int h = 0; h < num_heads; ++h) {
      const int g = h / group;
      const float* qh = q + (int64_t(i) * num_heads + h) * hd;
      float m = 0.0f, l = 0.0f;
      for (int64_t j0 = 0; j0 <= p; j0 += key_block) {
        const int c = static_cast<int>(std::min<int64_t>(key_block, p - j0 + 1));
        for (int t = 0; t < c; ++t) {
          float a = 0.0f;
          for (int d = 0; d < hd; ++d) a = std::fma(qh[d], key(j0 + t, g, d), a);
          s[t] = a * scale;
        }
        float mb = s[0];
        for (int t = 1; t < c; ++t) mb = s[t] > mb ? s[t] : mb;
        mb = mb + 0.0f;
        const float mn = j0 == 0 ? mb : (mb > m ? mb : m);
        std::fill(e.begin(), e.end(), 0.0f);
        for (int t = 0; t < c; ++t) e[t] = exp_f(s[t] - mn);
        std::copy(e.begin(), e.end(), lanes.begin());
        const float bsum = tree_sum(lanes.data(), key_block);
        if (j0 == 0) {
          l = bsum;
          std::fill(acc.begin(), acc.end(), 0.0f);
        } else {
          const float alpha = exp_f(m - mn);
          l = l * alpha;
          l = l + bsum;
          for (int d = 0; d < hd; ++d) acc[d] = acc[d] * alpha;
        }
        for (int t = 0; t < c; ++t) {
          for (int d = 0; d < hd; ++d) acc[d] = std::fma(e[t], value(j0 + t, g, d), acc[d]);
        }
        m = mn;
      }
      float* o = out + (int64_t(i) * num_heads + h) * hd;
      for (int d = 0; d < hd; ++d) o[d] = acc[d] / l;
    }
  }
}

void rope_inv_freq(int head_dim, float theta, float* inv_freq) {
  if (head_dim <= 0 || head_dim % 2 != 0) throw Error("rope: head_dim " + std::to_string(head_dim) + " is not even");
  if (!(theta > 0.0f)) throw Error("rope: theta must be positive");
  for (int i = 0; i < head_dim / 2; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / static_cast<float>(pow_d(theta, e));
  }
}

void rope_apply_at(float* x, int n, int heads, int head_dim, const int64_t* positions, const float* inv_freq) {
  rope_apply_partial_at(x, n, heads, head_dim, head_dim, positions, inv_freq);
}

void rope_apply_partial_at(float* x, int n, int heads, int head_dim, int rotary_dim, const int64_t* positions,
                           const float* inv_freq) {
  if (head_dim <= 0 || head_dim % 2 != 0) throw Error("rope: head_dim " + std::to_string(head_dim) + " is not even");
  if (rotary_dim <= 0 || rotary_dim % 2 != 0 || rotary_dim > head_dim)
    throw Error("rope: rotary_dim " + std::to_string(rotary_dim) + " is not even and at most head_dim " +
                std::to_string(head_dim));
  const int half = rotary_dim / 2;
  const int64_t ld = int64_t(heads) * head_dim;
  const int nt = num_threads();
#pragma omp parallel num_threads(nt) if (nt > 1 && (int64_t(n) * ld >= (1 << 16) || force_parallel()))
  {
    std::vector<float> cs(half), sn(half);
#pragma omp for schedule(static)
    for (int i = 0; i < n; ++i) {
      const float posf = static_cast<float>(positions[i]);
      for (int j = 0; j < half; ++j) sincos_f(posf * inv_freq[j], &sn[j], &cs[j]);
      for (int h = 0; h < heads; ++h) {
        float* xr = x + i * ld + int64_t(h) * head_dim;
        for (int j = 0; j < half; ++j) {
          const float x1 = xr[j], x2 = xr[j + half];
          xr[j] = x1 * cs[j] - x2 * sn[j];
          xr[j + half] = x2 * cs[j] + x1 * sn[j];
        }
      }
    }
  }
}

void rope_apply(float* x, int n, int heads, int head_dim, int64_t start_pos, float theta) {
  if (head_dim <= 0 || head_dim % 2 != 0) throw Error("rope: head_dim " + std::to_string(head_dim) + " is not even");
  std::vector<float> inv(head_dim / 2);
  rope_inv_freq(head_dim, theta, inv.data());
  std::vector<int64_t> pos(n);
  for (int i = 0; i < n; ++i) pos[i] = start_pos + i;
  rope_apply_at(x, n, heads, head_dim, pos.data(), inv.data());
}

}  // namespace parity::kernels
