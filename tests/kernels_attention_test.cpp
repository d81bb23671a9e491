// Paged attention, RoPE and trig contract tests (DESIGN.md rules 1–4 and the "Attention (hybrids)"
// note). attention() equals its scalar twin bit for bit on every instruction set and thread count,
// and a query row's bits do not depend on how its sequence was cut into calls (one-row decode,
// single-shot prefill, chunked prefill at unaligned splits), which physical blocks or block size
// hold the keys, what sits in cache slots past the query, or which other sequences share the
// call. The companion shows the comparisons can fail: another key block size changes the bits of
// rows with more than 16 keys. Accuracy is checked against a float64 softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/error.h"
#include "kernels/attention.h"
#include "kernels/isa.h"
#include "isa_test_support.h"
#include "test_support.h"
#include "kernels/trig.h"

namespace parity::kernels {
namespace {

using namespace test;


using parity::test::count_bit_mismatches;
using parity::test::same_bits;

struct Shape {
  int heads, kv_heads, head_dim, block_size;
  std::string name() const {
    return "H" + std::to_string(heads) + "/KV" + std::to_string(kv_heads) + " hd" + std::to_string(head_dim) +
           " bs" + std::to_string(block_size);
  }
};

// Group sizes 1..5 (every head-chunk kernel: 4 + 1 included), head_dim with and without a 16-lane
// tail, and paged block sizes 16, 32 and 48.
const Shape kShapes[] = {{4, 4, 64, 16}, {4, 2, 40, 32}, {6, 2, 128, 16}, {8, 2, 80, 48}, {5, 1, 24, 16}};

// A token stream: q [len][H·hd], k, v [len][KVH·hd], N(0, 1) with q scaled so that scores spread
// over several units (the running max then moves and the block rescaling is exercised).
struct Stream {
  Shape sh;
  int len = 0;
  float scale = 0;
  std::vector<float> q, k, v;
  int64_t ldq() const { return int64_t(sh.heads) * sh.head_dim; }
  int64_t ldk() const { return int64_t(sh.kv_heads) * sh.head_dim; }
  KvLayout layout() const { return KvLayout{sh.kv_heads, sh.head_dim, sh.block_size}; }
};

Stream make_stream(const Shape& sh, int len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Stream s;
  s.sh = sh;
  s.len = len;
  s.scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim));
  s.q.resize(size_t(len) * s.ldq());
  s.k.resize(size_t(len) * s.ldk());
  s.v.resize(size_t(len) * s.ldk());
  for (auto& x : s.q) x = 2.5f * nd(rng);
  for (auto& x : s.k) x = nd(rng);
  for (auto& x : s.v) x = nd(rng);
  return s;
}

// A paged cache with room for `len` tokens: logical block i lives in a shuffled physical block,
// with spare physical blocks in between. Unwritten slots hold `fill`.
struct Cache {
  KvLayout L;
  std::vector<int> table;
  std::vector<float> k, v;
};

Cache make_cache(const KvLayout& L, int len, uint32_t shuffle_seed, float fill) {
  Cache c;
  c.L = L;
  const int logical = (len + L.block_size - 1) / L.block_size;
  const int physical = 2 * logical + 3;
  std::vector<int> ids(physical);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(shuffle_seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  c.table.assign(ids.begin(), ids.begin() + logical);
  c.k.assign(size_t(physical) * L.block_floats(), fill);
  c.v.assign(size_t(physical) * L.block_floats(), fill);
  return c;
}

void write_tokens(Cache& c, const Stream& s, int begin, int count) {
  kv_write(c.L, c.k.data(), c.v.data(), c.table.data(), begin, count, s.k.data() + begin * s.ldk(),
           s.v.data() + begin * s.ldk());
}

// Rows [begin, begin + count) of the stream through attention() (or the reference), keys written first.
std::vector<float> run_rows(const Stream& s, Cache& c, int begin, int count, bool reference = false) {
  write_tokens(c, s, begin, count);
  std::vector<float> out(size_t(count) * s.ldq(), NAN);
  if (reference) {
    attention_reference(c.L, s.sh.heads, s.scale, s.q.data() + begin * s.ldq(), count, begin, c.k.data(), c.v.data(),
                        c.table.data(), out.data());
  } else {
    attention(c.L, s.sh.heads, s.scale, s.q.data() + begin * s.ldq(), count, begin, c.k.data(), c.v.data(),
              c.table.data(), out.data());
  }
  return out;
}

std::vector<float> prefill(const Stream& s, uint32_t shuffle_seed = 7, bool reference = false) {
  Cache c = make_cache(s.layout(), s.len, shuffle_seed, NAN);
  return run_rows(s, c, 0, s.len, reference);
}

// Calls split at the given boundaries (ascending, starting at 0, ending at len).
std::vector<float> chunked(const Stream& s, const std::vector<int>& cuts, uint32_t shuffle_seed = 7) {
  Cache c = make_cache(s.layout(), s.len, shuffle_seed, NAN);
  std::vector<float> out;
  for (size_t i = 0; i + 1 < cuts.size(); ++i) {
    const std::vector<float> part = run_rows(s, c, cuts[i], cuts[i + 1] - cuts[i]);
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

std::vector<float> decode(const Stream& s, uint32_t shuffle_seed = 7) {
  std::vector<int> cuts(s.len + 1);
  std::iota(cuts.begin(), cuts.end(), 0);
  return chunked(s, cuts, shuffle_seed);
}

// Softmax attention in float64 straight from the token rows.
std::vector<double> attention_f64(const Stream& s) {
  const int H = s.sh.heads, hd = s.sh.head_dim, group = H / s.sh.kv_heads;
  std::vector<double> out(size_t(s.len) * s.ldq()), w(s.len);
  for (int i = 0; i < s.len; ++i) {
    for (int h = 0; h < H; ++h) {
      const int g = h / group;
      const float* q = s.q.data() + i * s.ldq() + h * hd;
      double m = -INFINITY;
      for (int j = 0; j <= i; ++j) {
        const float* k = s.k.data() + j * s.ldk() + g * hd;
        double a = 0;
        for (int d = 0; d < hd; ++d) a += double(q[d]) * k[d];
        w[j] = a * s.scale;
        m = std::max(m, w[j]);
      }
      double l = 0;
      for (int j = 0; j <= i; ++j) l += (w[j] = std::exp(w[j] - m));
      for (int d = 0; d < hd; ++d) {
        double a = 0;
        for (int j = 0; j <= i; ++j) a += w[j] * s.v[j * s.ldk() + g * hd + d];
        out[i * s.ldq() + h * hd + d] = a / l;
      }
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Accuracy.

// Measured over the shapes below (max |Δ| over all outputs; outputs are convex combinations of
// N(0, 1) values, so |out| < ~4): 1.9e-6 (head_dim 24) to 4.0e-6 (head_dim 128). It is dominated
// by the fp32 scores: q·k sums head_dim products of size ~2.5, so a score carries ~1e-6 absolute
// rounding, which becomes a relative error of the softmax weights. 2e-5 leaves a 5x margin while a
// wrong mask, a missed rescale or a wrong kv head gives errors near 1e-1.
constexpr double kAttnAbsBound = 2e-5;

TEST(KernelsAttention, MatchesFloat64Softmax) {
  for (const Shape& sh : kShapes) {
    const Stream s = make_stream(sh, 150, 1);
    const std::vector<double> ref = attention_f64(s);
    const std::vector<float> out = prefill(s);
    double err = 0;
    for (size_t i = 0; i < ref.size(); ++i) err = std::max(err, std::abs(double(out[i]) - ref[i]));
    std::printf("  attention vs f64 (%s, 150 rows): max |d| %.3g\n", sh.name().c_str(), err);
    EXPECT_LE(err, kAttnAbsBound) << sh.name();
  }
}

// ---------------------------------------------------------------------------------------------
// Twins and dispatch.

TEST(KernelsAttention, EveryIsaEqualsScalarTwin) {
  for (const Shape& sh : kShapes) {
    const Stream s = make_stream(sh, 300, 2);
    const std::vector<float> ref = prefill(s, 7, /*reference=*/true);
    for (Isa isa : kAllIsas) {
      if (!cpu_has(isa)) continue;
      IsaGuard guard(isa);
      const std::vector<float> out = prefill(s);
      EXPECT_EQ(count_bit_mismatches(out.data(), ref.data(), ref.size()), 0u) << sh.name() << " " << isa_name(isa);
    }
  }
}

TEST(KernelsAttention, ThreadCountDoesNotChangeBits) {
  for (const Shape& sh : kShapes) {
    const Stream s = make_stream(sh, 200, 3);
    std::vector<float> one;
    {
      ThreadGuard t(1);
      one = prefill(s);
    }
    for (int n : {2, 3}) {
      ThreadGuard t(n);
      const std::vector<float> out = prefill(s);
      EXPECT_TRUE(same_bits(out.data(), one.data(), one.size())) << sh.name() << " threads " << n;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Schedule invariance.

TEST(KernelsAttention, DecodeEqualsPrefill) {
  for (const Shape& sh : kShapes) {
    const Stream s = make_stream(sh, 170, 4);
    const std::vector<float> p = prefill(s), d = decode(s);
    EXPECT_EQ(count_bit_mismatches(p.data(), d.data(), p.size()), 0u) << sh.name();
  }
}

TEST(KernelsAttention, ChunkedPrefillAtUnalignedSplitsEqualsPrefill) {
  for (const Shape& sh : kShapes) {
    const Stream s = make_stream(sh, 170, 5);
    const std::vector<float> p = prefill(s);
    for (const std::vector<int>& cuts : {std::vector<int>{0, 7, 23, 40, 41, 100, 170}, std::vector<int>{0, 16, 17, 170},
                                         std::vector<int>{0, 1, 2, 99, 169, 170}}) {
      const std::vector<float> c = chunked(s, cuts);
      EXPECT_EQ(count_bit_mismatches(p.data(), c.data(), p.size()), 0u) << sh.name();
    }
  }
}

TEST(KernelsAttention, BlockTableAndBlockSizeDoNotChangeBits) {
  for (const Shape& sh : kShapes) {
    const Stream s = make_stream(sh, 130, 6);
    const std::vector<float> p = prefill(s, 7);
    EXPECT_TRUE(same_bits(p.data(), prefill(s, 12345).data(), p.size())) << sh.name();
    for (int bs : {16, 32, 64, 112}) {
      Shape other = sh;
      other.block_size = bs;
      Stream s2 = s;
      s2.sh = other;
      EXPECT_TRUE(same_bits(p.data(), prefill(s2, 99).data(), p.size())) << sh.name() << " as bs " << bs;
    }
  }
}

// One packed call over several sequences (different lengths, start positions and block tables)
// equals one call per sequence.
TEST(KernelsAttention, PackedSequencesEqualSeparateCalls) {
  const Shape sh{6, 2, 64, 16};
  const int starts[] = {0, 37, 5, 130};
  const int counts[] = {50, 1, 27, 1};
  std::vector<Stream> streams;
  std::vector<Cache> caches;
  std::vector<std::vector<float>> separate;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(make_stream(sh, starts[i] + counts[i], 20 + i));
    caches.push_back(make_cache(streams[i].layout(), streams[i].len, 40 + i, NAN));
    write_tokens(caches[i], streams[i], 0, starts[i]);
    separate.push_back(run_rows(streams[i], caches[i], starts[i], counts[i]));
  }
  const int64_t ldq = streams[0].ldq();
  std::vector<float> q, out;
  std::vector<AttnSeq> seqs;
  // All sequences share one physical pool: give each its own slice by offsetting its table.
  const KvLayout L = streams[0].layout();
  std::vector<float> kpool, vpool;
  std::vector<std::vector<int>> tables;
  for (int i = 0; i < 4; ++i) {
    const int base = static_cast<int>(kpool.size() / L.block_floats());
    kpool.insert(kpool.end(), caches[i].k.begin(), caches[i].k.end());
    vpool.insert(vpool.end(), caches[i].v.begin(), caches[i].v.end());
    tables.push_back(caches[i].table);
    for (int& b : tables.back()) b += base;
  }
  int64_t row = 0;
  for (int i = 0; i < 4; ++i) {
    q.insert(q.end(), streams[i].q.begin() + starts[i] * ldq, streams[i].q.begin() + (starts[i] + counts[i]) * ldq);
    seqs.push_back(AttnSeq{row, counts[i], starts[i], tables[i].data()});
    row += counts[i];
  }
  out.assign(size_t(row) * ldq, NAN);
  for (int threads : {1, 3}) {
    ThreadGuard t(threads);
    attention_varlen(L, sh.heads, streams[0].scale, q.data(), seqs.data(), 4, kpool.data(), vpool.data(), out.data());
    for (int i = 0; i < 4; ++i) {
      EXPECT_TRUE(same_bits(out.data() + seqs[i].row * ldq, separate[i].data(), separate[i].size()))
          << "sequence " << i << " threads " << threads;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Masking and GQA.

// Slots past a query's position (the rest of its last block and later blocks) may hold anything:
// NaN, infinities, huge values or the sequence's later tokens. None of it reaches any output bit.
TEST(KernelsAttention, MaskedSlotsContributeNothing) {
  for (const Shape& sh : kShapes) {
    const Stream s = make_stream(sh, 90, 8);
    const std::vector<float> clean = decode(s);  // every call sees NaN past its position
    for (float garbage : {0.0f, INFINITY, -INFINITY, 3e38f, -7.0f}) {
      for (Isa isa : kAllIsas) {
        if (!cpu_has(isa)) continue;
        IsaGuard guard(isa);
        Cache c = make_cache(s.layout(), s.len, 7, garbage);
        std::vector<float> out;
        for (int i = 0; i < s.len; ++i) {
          const std::vector<float> r = run_rows(s, c, i, 1);
          out.insert(out.end(), r.begin(), r.end());
        }
        EXPECT_TRUE(same_bits(out.data(), clean.data(), clean.size())) << sh.name() << " garbage " << garbage;
      }
    }
    // Later tokens already in the cache (as after a preemption that is recomputed) change nothing.
    Cache full = make_cache(s.layout(), s.len, 7, NAN);
    write_tokens(full, s, 0, s.len);
    std::vector<float> out;
    for (int i = 0; i < s.len; ++i) {
      std::vector<float> r(size_t(s.ldq()));
      attention(full.L, sh.heads, s.scale, s.q.data() + i * s.ldq(), 1, i, full.k.data(), full.v.data(),
                full.table.data(), r.data());
      out.insert(out.end(), r.begin(), r.end());
    }
    EXPECT_TRUE(same_bits(out.data(), clean.data(), clean.size())) << sh.name() << " later tokens";
    for (float x : clean) ASSERT_TRUE(std::isfinite(x));
  }
}

// Head h reads kv head h / (H / KVH): the same bits as multi-head attention over a cache in which
// every query head has its own copy of that kv head.
TEST(KernelsAttention, GqaHeadReadsItsGroupsKvHead) {
  for (const Shape& sh : {Shape{8, 2, 64, 16}, Shape{6, 3, 40, 32}, Shape{5, 1, 24, 16}}) {
    const Stream s = make_stream(sh, 70, 9);
    Stream mha = s;
    mha.sh.kv_heads = sh.heads;
    const int group = sh.heads / sh.kv_heads, hd = sh.head_dim;
    mha.k.assign(size_t(s.len) * mha.ldk(), 0.0f);
    mha.v.assign(size_t(s.len) * mha.ldk(), 0.0f);
    for (int t = 0; t < s.len; ++t) {
      for (int h = 0; h < sh.heads; ++h) {
        std::copy_n(s.k.begin() + t * s.ldk() + (h / group) * hd, hd, mha.k.begin() + t * mha.ldk() + h * hd);
        std::copy_n(s.v.begin() + t * s.ldk() + (h / group) * hd, hd, mha.v.begin() + t * mha.ldk() + h * hd);
      }
    }
    const std::vector<float> a = prefill(s), b = prefill(mha);
    EXPECT_TRUE(same_bits(a.data(), b.data(), a.size())) << sh.name();
    // And the mapping is not a no-op: giving head 0 the next kv head's copy changes its output.
    if (sh.kv_heads > 1) {
      Stream wrong = mha;
      for (int t = 0; t < s.len; ++t) {
        std::copy_n(s.k.begin() + t * s.ldk() + hd, hd, wrong.k.begin() + t * wrong.ldk());
        std::copy_n(s.v.begin() + t * s.ldk() + hd, hd, wrong.v.begin() + t * wrong.ldk());
      }
      const std::vector<float> w = prefill(wrong);
      EXPECT_FALSE(same_bits(a.data(), w.data(), a.size())) << sh.name();
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Companion: the comparisons above can fail. With 32-key blocks the running max moves at other
// points, so the rescaling and the sums round differently for rows with more than 16 keys; rows
// with at most 16 keys see one block either way (the extra tree level only adds zeros).
TEST(KernelsAttention, CompanionKeyBlockSizeChangesBits) {
  const Shape sh{4, 2, 64, 32};
  const Stream s = make_stream(sh, 200, 10);
  Cache c = make_cache(s.layout(), s.len, 7, NAN);
  write_tokens(c, s, 0, s.len);
  std::vector<float> b16(size_t(s.len) * s.ldq()), b32(b16.size());
  attention_reference(c.L, sh.heads, s.scale, s.q.data(), s.len, 0, c.k.data(), c.v.data(), c.table.data(),
                      b16.data(), 16);
  attention_reference(c.L, sh.heads, s.scale, s.q.data(), s.len, 0, c.k.data(), c.v.data(), c.table.data(),
                      b32.data(), 32);
  const size_t head = 16 * size_t(s.ldq());
  EXPECT_TRUE(same_bits(b16.data(), b32.data(), head));
  const size_t bad = count_bit_mismatches(b16.data() + head, b32.data() + head, b16.size() - head);
  std::printf("  key block 32 vs 16: %zu of %zu outputs of rows >= 16 differ\n", bad, b16.size() - head);
  EXPECT_GT(bad, (b16.size() - head) / 10);
}

TEST(KernelsAttention, RejectsBadLayouts) {
  std::vector<float> buf(4096);
  const int table[1] = {0};
  EXPECT_THROW(attention(KvLayout{2, 64, 24}, 4, 1.0f, buf.data(), 1, 0, buf.data(), buf.data(), table, buf.data()),
               Error);
  EXPECT_THROW(attention(KvLayout{3, 16, 16}, 4, 1.0f, buf.data(), 1, 0, buf.data(), buf.data(), table, buf.data()),
               Error);
  EXPECT_THROW(attention(KvLayout{1, 1024, 16}, 1, 1.0f, buf.data(), 1, 0, buf.data(), buf.data(), table, buf.data()),
               Error);
}

// ---------------------------------------------------------------------------------------------
// RoPE.

// inv_freq is HF's fp32 sequence with pow evaluated accurately. Two fp32 roundings (pow, then the
// reciprocal) keep it within 2 ulp of 1/θ^(2i/hd).
TEST(KernelsAttention, RopeInvFreqMatchesFloat64) {
  for (int hd : {64, 128, 96}) {
    for (float theta : {10000.0f, 500000.0f, 1e6f}) {
      std::vector<float> inv(hd / 2);
      rope_inv_freq(hd, theta, inv.data());
      for (int i = 0; i < hd / 2; ++i) {
        const double e = double(static_cast<float>(2 * i) / static_cast<float>(hd));
        const double ref = 1.0 / std::pow(double(theta), e);
        const double ulp = std::nextafter(float(ref), INFINITY) - float(ref);
        EXPECT_LE(std::abs(inv[i] - ref), 2.0 * ulp) << "hd " << hd << " theta " << theta << " i " << i;
      }
    }
  }
}

// Rotation against float64 with HF's fp32 angle: x1·cos − x2·sin and x2·cos + x1·sin each carry two
// products and one sum in fp32, and cos/sin are within ~0.5 ulp: 3e-7 · max(|x1|, |x2|) bounds it
// (measured <= 1.2e-7).
TEST(KernelsAttention, RopeMatchesFloat64) {
  const int heads = 3, hd = 64, n = 40;
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> inv(hd / 2);
  rope_inv_freq(hd, 10000.0f, inv.data());
  for (int64_t start : {int64_t(0), int64_t(1000), int64_t(99990), int64_t(3000000)}) {
    std::vector<float> x(size_t(n) * heads * hd);
    for (auto& e : x) e = nd(rng);
    std::vector<float> y = x;
    rope_apply(y.data(), n, heads, hd, start, 10000.0f);
    double worst = 0;
    for (int i = 0; i < n; ++i) {
      for (int h = 0; h < heads; ++h) {
        for (int j = 0; j < hd / 2; ++j) {
          const double ang = double(static_cast<float>(start + i) * inv[j]);  // HF's fp32 angle
          const size_t o = (size_t(i) * heads + h) * hd;
          const double x1 = x[o + j], x2 = x[o + j + hd / 2];
          const double r1 = x1 * std::cos(ang) - x2 * std::sin(ang), r2 = x2 * std::cos(ang) + x1 * std::sin(ang);
          const double scale = std::max(std::abs(x1), std::abs(x2));
          worst = std::max({worst, std::abs(y[o + j] - r1) / scale, std::abs(y[o + j + hd / 2] - r2) / scale});
        }
      }
    }
    std::printf("  rope vs f64 from position %lld: %.3g\n", static_cast<long long>(start), worst);
    EXPECT_LE(worst, 3e-7);
  }
}

TEST(KernelsAttention, RopeRowDependsOnlyOnItsPosition) {
  const int heads = 4, hd = 128, n = 37;
  std::mt19937 rng(12);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(n) * heads * hd);
  for (auto& e : x) e = nd(rng);
  std::vector<float> all = x;
  rope_apply(all.data(), n, heads, hd, 500, 10000.0f);
  for (int i = 0; i < n; ++i) {  // the same row alone (decode) at its position
    std::vector<float> row(x.begin() + size_t(i) * heads * hd, x.begin() + size_t(i + 1) * heads * hd);
    rope_apply(row.data(), 1, heads, hd, 500 + i, 10000.0f);
    EXPECT_TRUE(same_bits(row.data(), all.data() + size_t(i) * heads * hd, row.size())) << i;
  }
  // Explicit positions, shuffled rows, threads: the same bits.
  std::vector<float> inv(hd / 2);
  rope_inv_freq(hd, 10000.0f, inv.data());
  std::vector<int64_t> pos(n);
  std::vector<int> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<float> shuffled(x.size());
  for (int i = 0; i < n; ++i) {
    pos[i] = 500 + perm[i];
    std::copy_n(x.begin() + size_t(perm[i]) * heads * hd, heads * hd, shuffled.begin() + size_t(i) * heads * hd);
  }
  ThreadGuard t(2);
  rope_apply_at(shuffled.data(), n, heads, hd, pos.data(), inv.data());
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(same_bits(shuffled.data() + size_t(i) * heads * hd, all.data() + size_t(perm[i]) * heads * hd,
                          size_t(heads) * hd));
  }
  // Position 0 is the identity (cos 0 = 1, sin 0 = 0 exactly).
  std::vector<float> z(x.begin(), x.begin() + heads * hd);
  rope_apply(z.data(), 1, heads, hd, 0, 10000.0f);
  EXPECT_TRUE(same_bits(z.data(), x.data(), z.size()));
}

// ---------------------------------------------------------------------------------------------
// Trig and the double helpers.

double ulp_of(double ref) {
  const float f = static_cast<float>(std::abs(ref));
  return double(std::nextafter(f, INFINITY)) - double(f);
}

// Measured: every sampled result is the float nearest the float64 value (<= 0.5 ulp); the bound
// allows 1 ulp of the result (or 1e-45 near zero) so that a rounding tie cannot flake.
TEST(KernelsTrig, SinCosWithinOneUlpOverTheRopeRange) {
  std::mt19937 rng(13);
  std::vector<float> xs;
  for (int i = -20000; i <= 20000; ++i) xs.push_back(static_cast<float>(i) * 0.001f);  // [-20, 20], dense
  std::uniform_real_distribution<float> wide(-1.7e7f, 1.7e7f), mid(0.0f, 2e5f);
  for (int i = 0; i < 100000; ++i) xs.push_back(mid(rng));
  for (int i = 0; i < 100000; ++i) xs.push_back(wide(rng));
  // Floats next to multiples of π/2, where the reduction cancels most bits.
  for (int k = 1; k < 20000; k += 7) {
    const float f = static_cast<float>(k * 1.5707963267948966);
    xs.push_back(f);
    xs.push_back(std::nextafter(f, 0.0f));
    xs.push_back(std::nextafter(f, INFINITY));
  }
  double worst = 0;
  size_t not_nearest = 0;
  for (float x : xs) {
    float s, c;
    sincos_f(x, &s, &c);
    const double rs = std::sin(double(x)), rc = std::cos(double(x));
    const double es = std::abs(s - rs) / std::max(ulp_of(rs), 1e-45), ec = std::abs(c - rc) / std::max(ulp_of(rc), 1e-45);
    worst = std::max({worst, es, ec});
    not_nearest += (s != static_cast<float>(rs)) + (c != static_cast<float>(rc));
    ASSERT_LE(es, 1.0) << "sin(" << x << ")";
    ASSERT_LE(ec, 1.0) << "cos(" << x << ")";
  }
  std::printf("  sin/cos over %zu arguments: worst %.3f ulp, %zu not the nearest float\n", xs.size(), worst,
              not_nearest);
}

TEST(KernelsTrig, SymmetryAndSpecialValues) {
  EXPECT_EQ(sin_f(0.0f), 0.0f);
  EXPECT_EQ(cos_f(0.0f), 1.0f);
  std::mt19937 rng(14);
  std::uniform_real_distribution<float> ud(-1e6f, 1e6f);
  for (int i = 0; i < 10000; ++i) {  // the reduction is symmetric, so odd/even symmetry is exact
    const float x = ud(rng);
    EXPECT_EQ(sin_f(-x), -sin_f(x));
    EXPECT_EQ(cos_f(-x), cos_f(x));
  }
  for (float x : {NAN, INFINITY, -INFINITY}) {
    EXPECT_TRUE(std::isnan(sin_f(x)));
    EXPECT_TRUE(std::isnan(cos_f(x)));
  }
}

TEST(KernelsTrig, DoubleExpLogPowAreAccurate) {
  std::mt19937 rng(15);
  std::uniform_real_distribution<double> ue(-700.0, 700.0), ul(-300.0, 300.0), ufrac(0.0, 1.0);
  double we = 0, wl = 0, wp = 0;
  for (int i = 0; i < 20000; ++i) {
    const double x = ue(rng);
    we = std::max(we, std::abs(exp_d(x) - std::exp(x)) / std::exp(x));
    const double y = std::pow(10.0, ul(rng));
    wl = std::max(wl, std::abs(log_d(y) - std::log(y)) / std::max(1.0, std::abs(std::log(y))));
    const double b = 1.0 + 1e7 * ufrac(rng), e = ufrac(rng);
    wp = std::max(wp, std::abs(pow_d(b, e) - std::pow(b, e)) / std::pow(b, e));
  }
  std::printf("  exp_d %.3g, log_d %.3g, pow_d %.3g (relative)\n", we, wl, wp);
  EXPECT_LE(we, 1e-15);
  EXPECT_LE(wl, 1e-15);
  EXPECT_LE(wp, 5e-14);
  EXPECT_EQ(exp_d(0.0), 1.0);
  EXPECT_EQ(log_d(1.0), 0.0);
  EXPECT_EQ(exp_d(1000.0), INFINITY);
  EXPECT_EQ(exp_d(-1000.0), 0.0);
}

}  // namespace
}  // namespace parity::kernels

// Partial rotary (Bamba): the first rotary_dim elements of each head rotate exactly as a rope of head_dim
// rotary_dim would; the rest pass unchanged. rotary_dim = head_dim is rope_apply_at.
TEST(KernelsAttention, PartialRopeRotatesTheLeadingPartOnly) {
  const int n = 3, heads = 2, hd = 8, rot = 4;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<float> x(std::size_t(n) * heads * hd);
  for (auto& v : x) v = nd(rng);
  const int64_t pos[n] = {0, 5, 77};
  std::vector<float> inv(rot / 2), inv_full(hd / 2);
  parity::kernels::rope_inv_freq(rot, 10000.0f, inv.data());
  parity::kernels::rope_inv_freq(hd, 10000.0f, inv_full.data());
  std::vector<float> part = x;
  parity::kernels::rope_apply_partial_at(part.data(), n, heads, hd, rot, pos, inv.data());
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < heads; ++h) {
      const std::size_t off = (std::size_t(i) * heads + h) * hd;
      std::vector<float> lead(x.begin() + off, x.begin() + off + rot);  // as a head of its own
      parity::kernels::rope_apply_at(lead.data(), 1, 1, rot, &pos[i], inv.data());
      EXPECT_EQ(std::memcmp(lead.data(), part.data() + off, rot * 4), 0);
      EXPECT_EQ(std::memcmp(x.data() + off + rot, part.data() + off + rot, (hd - rot) * 4), 0) << "tail untouched";
    }
  std::vector<float> full = x, same = x;
  parity::kernels::rope_apply_at(full.data(), n, heads, hd, pos, inv_full.data());
  parity::kernels::rope_apply_partial_at(same.data(), n, heads, hd, hd, pos, inv_full.data());
  EXPECT_EQ(std::memcmp(full.data(), same.data(), full.size() * 4), 0);
  EXPECT_NE(std::memcmp(full.data(), part.data(), full.size() * 4), 0) << "partial differs from full";
  EXPECT_THROW(parity::kernels::rope_apply_partial_at(same.data(), n, heads, hd, 3, pos, inv.data()), parity::Error);
}
