// GPU attention (src/kernels_cuda/attention*.cu) against the CPU kernels: RoPE, the KV append and
// the attention output bit for bit, over ragged sequences in paged, scattered blocks, through the
// tiled prefill kernel and the row kernel; a row's bits the same for single-shot prefill, chunked
// prefill mixed with other sequences at any batch position, and token-by-token decode; and the
// companion showing that another key-block order would have been seen.
#include <algorithm>
#include <map>
#include <numeric>
#include <random>

#include "kernels/attention.h"
#include "kernels_cuda/attention.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/pass_plan.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

struct Chunk {
  int seq;
  int64_t start;
  int n;
  bool kv_only = false;  // a pass of such chunks appends its keys and values and computes no attention
};
using Schedule = std::vector<std::vector<Chunk>>;  // passes of chunks

// Sequences of given lengths in one paged cache whose physical blocks are shuffled, so that
// neighbouring positions of a sequence rarely sit in neighbouring blocks.
struct Scene {
  int nq, nkv, hd, bs;
  bool use_rope;
  std::vector<int> lens;
  int stride = 0, num_blocks = 0;
  std::vector<int> tables;  // [seq][stride]
  std::vector<float> inv_freq;
  float scale = 0.3f;

  Scene(int nq_, int nkv_, int hd_, int bs_, bool rope, std::vector<int> l)
      : nq(nq_), nkv(nkv_), hd(hd_), bs(bs_), use_rope(rope), lens(std::move(l)) {
    for (int n : lens) stride = std::max(stride, (n + bs - 1) / bs);
    num_blocks = stride * static_cast<int>(lens.size());
    tables.resize(std::size_t(num_blocks));
    std::iota(tables.begin(), tables.end(), 0);
    std::shuffle(tables.begin(), tables.end(), std::mt19937(7));
    inv_freq.resize(std::size_t(hd / 2));
    kernels::rope_inv_freq(hd, 10000.0f, inv_freq.data());
  }
  kernels::KvLayout layout() const { return {nkv, hd, bs}; }
  std::size_t cache_floats() const { return std::size_t(num_blocks) * std::size_t(layout().block_floats()); }
  int qd() const { return nq * hd; }
  int kvd() const { return nkv * hd; }
  // A row's inputs depend only on (sequence, position): every schedule feeds the same rows.
  std::vector<float> row(int seq, int64_t pos, int which, int cols) const {
    return test::uniform(std::size_t(cols), uint64_t(seq) * 1000003u + uint64_t(pos) * 7u + uint64_t(which));
  }
};

struct Result {
  std::map<std::pair<int, int64_t>, std::vector<float>> out;  // (seq, pos) → output row
  std::vector<float> k_cache, v_cache;
};

// The pass's packed q, k, v rows.
void pack(const Scene& sc, const std::vector<Chunk>& pass, std::vector<float>& q, std::vector<float>& k,
          std::vector<float>& v) {
  q.clear(), k.clear(), v.clear();
  for (const Chunk& c : pass)
    for (int i = 0; i < c.n; ++i) {
      const auto a = sc.row(c.seq, c.start + i, 0, sc.qd()), b = sc.row(c.seq, c.start + i, 1, sc.kvd()),
                 d = sc.row(c.seq, c.start + i, 2, sc.kvd());
      q.insert(q.end(), a.begin(), a.end());
      k.insert(k.end(), b.begin(), b.end());
      v.insert(v.end(), d.begin(), d.end());
    }
}

void collect(const Scene& sc, const std::vector<Chunk>& pass, const std::vector<float>& o, Result& r) {
  std::size_t row = 0;
  for (const Chunk& c : pass)
    for (int i = 0; i < c.n; ++i, ++row)
      r.out[{c.seq, c.start + i}].assign(o.begin() + row * sc.qd(), o.begin() + (row + 1) * sc.qd());
}

bool kv_only(const std::vector<Chunk>& pass) {
  return std::all_of(pass.begin(), pass.end(), [](const Chunk& c) { return c.kv_only; });
}

Result run_cpu(const Scene& sc, const Schedule& sched) {
  Result r;
  r.k_cache.assign(sc.cache_floats(), 0.0f);
  r.v_cache.assign(sc.cache_floats(), 0.0f);
  std::vector<float> q, k, v;
  for (const auto& pass : sched) {
    pack(sc, pass, q, k, v);
    std::vector<int64_t> positions;
    for (const Chunk& c : pass)
      for (int i = 0; i < c.n; ++i) positions.push_back(c.start + i);
    const int T = static_cast<int>(positions.size());
    if (sc.use_rope) {
      kernels::rope_apply_at(q.data(), T, sc.nq, sc.hd, positions.data(), sc.inv_freq.data());
      kernels::rope_apply_at(k.data(), T, sc.nkv, sc.hd, positions.data(), sc.inv_freq.data());
    }
    std::vector<kernels::AttnSeq> seqs;
    int64_t row = 0;
    for (const Chunk& c : pass) {
      const int* table = sc.tables.data() + std::size_t(c.seq) * sc.stride;
      kernels::kv_write(sc.layout(), r.k_cache.data(), r.v_cache.data(), table, c.start, c.n,
                        k.data() + row * sc.kvd(), v.data() + row * sc.kvd());
      seqs.push_back({row, c.n, c.start, table});
      row += c.n;
    }
    if (kv_only(pass)) continue;
    std::vector<float> o(q.size());
    kernels::attention_varlen(sc.layout(), sc.nq, sc.scale, q.data(), seqs.data(), static_cast<int>(seqs.size()),
                              r.k_cache.data(), r.v_cache.data(), o.data());
    collect(sc, pass, o, r);
  }
  return r;
}

// How the GPU shares a pass out: every row alone (no plan), the pass's AttnPlan (tiles of prefill
// rows, decode rows alone or, over 1024+ keys, split), or the plan with every decode row split.
enum class Plan { RowsOnly, Default, SplitAll };

Result run_gpu(const Scene& sc, const Schedule& sched, Plan plan = Plan::Default) {
  Result r;
  cuda::DeviceBuffer<float> kc(sc.cache_floats()), vc(sc.cache_floats()), inv, dq, dk, dv, dout;
  kc.zero();
  vc.zero();
  inv.upload(sc.inv_freq);
  cuda::DeviceBuffer<int32_t> ints, tables, work_buf;
  cuda::DeviceBuffer<float> scratch;
  cuda::DeviceBuffer<int64_t> starts;
  std::vector<float> q, k, v;
  for (const auto& pass : sched) {
    pack(sc, pass, q, k, v);
    std::vector<cuda::SeqSpan> spans;
    std::vector<int32_t> tab;
    for (const Chunk& c : pass) {
      spans.push_back({c.seq, c.start, c.n});
      tab.insert(tab.end(), sc.tables.begin() + std::ptrdiff_t(c.seq) * sc.stride,
                 sc.tables.begin() + std::ptrdiff_t(c.seq + 1) * sc.stride);
    }
    const cuda::PassSeqs p = cuda::PassPlan(spans, cuda::ScanGrid{}).upload(ints, starts);
    const cuda::AttnWork work =
        plan == Plan::RowsOnly
            ? cuda::AttnWork{}
            : cuda::AttnPlan(spans, sc.nq, plan == Plan::SplitAll ? 1 : cuda::kAttnSplitMinKeys).upload(work_buf, scratch);
    tables.upload(tab);
    const cuda::KvTables kt{tables.data(), sc.stride};
    dq.upload(q);
    dk.upload(k);
    dv.upload(v);
    dout.resize(q.size());
    if (sc.use_rope) {
      cuda::rope(dq.data(), sc.qd(), sc.nq, sc.hd, p, inv.data(), nullptr);
      cuda::rope(dk.data(), sc.kvd(), sc.nkv, sc.hd, p, inv.data(), nullptr);
    }
    cuda::kv_write(sc.layout(), kc.data(), vc.data(), kt, p, dk.data(), dv.data(), sc.kvd(), nullptr);
    if (kv_only(pass)) continue;
    cuda::attention(sc.layout(), sc.nq, sc.scale, dq.data(), sc.qd(), p, kt, kc.data(), vc.data(), dout.data(),
                    sc.qd(), nullptr, work);
    collect(sc, pass, dout.download(q.size()), r);
  }
  r.k_cache = kc.download(sc.cache_floats());
  r.v_cache = vc.download(sc.cache_floats());
  return r;
}

Schedule single_shot(const Scene& sc) {
  Schedule s(1);
  for (int i = 0; i < static_cast<int>(sc.lens.size()); ++i) s[0].push_back({i, 0, sc.lens[std::size_t(i)]});
  return s;
}

// Passes of random chunks (1..97 rows) of random unfinished sequences in random batch order.
Schedule chunked_mixed(const Scene& sc, uint32_t seed) {
  std::mt19937 g(seed);
  std::vector<int64_t> done(sc.lens.size(), 0);
  Schedule s;
  for (;;) {
    std::vector<int> open;
    for (int i = 0; i < static_cast<int>(sc.lens.size()); ++i)
      if (done[std::size_t(i)] < sc.lens[std::size_t(i)]) open.push_back(i);
    if (open.empty()) return s;
    std::shuffle(open.begin(), open.end(), g);
    open.resize(std::size_t(1 + g() % open.size()));
    s.emplace_back();
    for (int i : open) {
      const int64_t left = sc.lens[std::size_t(i)] - done[std::size_t(i)];
      const int n = static_cast<int>(std::min<int64_t>(left, 1 + g() % 97));
      s.back().push_back({i, done[std::size_t(i)], n});
      done[std::size_t(i)] += n;
    }
  }
}

// Every sequence one token per pass, all of them in each pass. In sanitizer mode one token a pass only
// at the positions where a row's keys reach the first 32-key chunk's edge, the 128-key chunk's, or the
// first or last two; the rows between two such positions arrive as one chunk (a prefill tile) in the
// same pass.
Schedule decode(const Scene& sc) {
  auto alone = [](int64_t pos, int len) {
    return !test::sanitizing() || pos < 2 || pos >= len - 2 || pos == 31 || pos == 32 || pos == 127 || pos == 128;
  };
  Schedule s;
  std::vector<int64_t> done(sc.lens.size(), 0);
  for (;;) {
    std::vector<Chunk> pass;
    for (int i = 0; i < static_cast<int>(sc.lens.size()); ++i) {
      const int len = sc.lens[std::size_t(i)];
      int64_t& pos = done[std::size_t(i)];
      if (pos >= len) continue;
      int n = 1;
      while (!alone(pos, len) && pos + n < len && !alone(pos + n, len)) ++n;
      pass.push_back({i, pos, n});
      pos += n;
    }
    if (pass.empty()) return s;
    s.push_back(pass);
  }
}

// GQA with RoPE (head_dim 64 and 128: the tiled prefill kernel), and NoPE with head_dim 192 (the
// row kernel for every row, two accumulators per thread); lengths cross the 16-key blocks, the
// kernels' 32- and 128-key chunks, the 16-row tiles and the physical blocks (in sanitizer mode shorter
// longest sequences, still past 128 keys).
std::vector<Scene> scenes() {
  return {Scene(8, 2, 64, 32, true, test::sweep({300, 37, 1, 129, 16}, {160, 37, 1, 129, 16})),
          Scene(4, 1, 128, 16, true, test::sweep({150, 2, 33}, {140, 2, 33})),
          Scene(3, 3, 192, 16, false, test::sweep({200, 17, 128}, {150, 17, 128}))};
}

int differing_rows(const Result& a, const Result& b) {
  int n = 0;
  for (const auto& [key, row] : a.out) n += !test::same_bits(row.data(), b.out.at(key).data(), row.size());
  return n;
}

TEST(CudaAttention, RopeKvAppendAndOutputEqualTheCpuBitForBit) {
  PARITY_REQUIRE_GPU();
  for (const Scene& sc : scenes()) {
    const Schedule s = chunked_mixed(sc, 11);
    const Result cpu = run_cpu(sc, s), gpu = run_gpu(sc, s);
    if (!test::sanitizing()) {  // sanitizer mode: the other plans' kernels run in RowBitsDoNotDependOnTheSchedule
      EXPECT_EQ(differing_rows(run_gpu(sc, s, Plan::RowsOnly), cpu), 0) << "row kernel only, hd " << sc.hd;
      EXPECT_EQ(differing_rows(run_gpu(sc, s, Plan::SplitAll), cpu), 0) << "decode rows split, hd " << sc.hd;
    }
    // The caches hold the rotated keys: RoPE and the paged append agree bit for bit.
    ASSERT_TRUE(test::same_bits(gpu.k_cache.data(), cpu.k_cache.data(), cpu.k_cache.size())) << "hd " << sc.hd;
    ASSERT_TRUE(test::same_bits(gpu.v_cache.data(), cpu.v_cache.data(), cpu.v_cache.size())) << "hd " << sc.hd;
    ASSERT_EQ(gpu.out.size(), cpu.out.size());
    EXPECT_EQ(differing_rows(gpu, cpu), 0) << "hd " << sc.hd;
    // Real values: rows are finite and not all zero.
    double mag = 0;
    for (const auto& [key, row] : gpu.out)
      for (float x : row) {
        ASSERT_TRUE(std::isfinite(x));
        mag += std::fabs(x);
      }
    EXPECT_GT(mag, 1.0);
  }
}

TEST(CudaAttention, RowBitsDoNotDependOnTheSchedule) {
  PARITY_REQUIRE_GPU();
  for (const Scene& sc : scenes()) {
    const Result one = run_gpu(sc, single_shot(sc));
    EXPECT_EQ(differing_rows(run_gpu(sc, single_shot(sc), Plan::RowsOnly), one), 0) << "tiles vs rows, hd " << sc.hd;
    EXPECT_EQ(differing_rows(run_gpu(sc, decode(sc), Plan::SplitAll), one), 0) << "split decode, hd " << sc.hd;
    EXPECT_EQ(differing_rows(run_gpu(sc, chunked_mixed(sc, 3)), one), 0) << "chunked, hd " << sc.hd;
    if (!test::sanitizing()) {  // sanitizer mode: one random cut is enough to launch the kernels
      EXPECT_EQ(differing_rows(run_gpu(sc, chunked_mixed(sc, 4)), one), 0) << "chunked, hd " << sc.hd;
    }
    EXPECT_EQ(differing_rows(run_gpu(sc, decode(sc)), one), 0) << "decode, hd " << sc.hd;
  }
}

// Decode over a long context (past 4096 keys, so the split path's running max spans several
// segments per thread): the default plan splits these rows; they equal the single-shot prefill's
// rows (tiled kernel), the row kernel's and the CPU's. Sanitizer mode: two query heads on one KV head, the
// first 4190 keys appended without attention (its quadratic prefill is what racecheck cannot afford), then
// three decode rows, against the same three rows as one chunk of a prefill pass.
TEST(CudaAttention, LongContextDecodeRowsEqualPrefillAndTheCpu) {
  PARITY_REQUIRE_GPU();
  const int len = test::pick(4200, 4193);
  const Scene sc(test::pick(8, 2), test::pick(2, 1), 64, 32, true, {len});
  const bool kv_first = test::sanitizing();
  Schedule s = {{{0, 0, 4190, kv_first}}};
  for (int64_t pos = 4190; pos < len; ++pos) s.push_back({{0, pos, 1}});
  const Schedule prefill = kv_first ? Schedule{{{0, 0, 4190, true}}, {{0, 4190, len - 4190}}} : single_shot(sc);
  const Result split = run_gpu(sc, s), rows = run_gpu(sc, s, Plan::RowsOnly), one = run_gpu(sc, prefill);
  EXPECT_EQ(differing_rows(split, one), 0);
  EXPECT_EQ(differing_rows(rows, one), 0);
  EXPECT_EQ(differing_rows(split, run_cpu(sc, s)), 0);
}

// The plan on the host (no device needed): prefill rows in 16-row tiles, short decode rows alone,
// long decode rows split while their scratch is small, alone again when there are many.
TEST(CudaAttnPlan, SharesAPassOutByShape) {
  const cuda::AttnPlan p({{0, 0, 40}, {1, 5, 1}, {2, 2000, 1}, {3, 100, 17}, {4, 1022, 1}}, 32);
  EXPECT_EQ(p.num_tiles(), 3 + 2);
  EXPECT_EQ(p.num_rows(), 2);  // positions 5 and 1022: fewer than 1024 keys
  EXPECT_EQ(p.num_long(), 1);  // position 2000
  std::vector<cuda::SeqSpan> many;
  for (int s = 0; s < 64; ++s) many.push_back({s, 100000, 1});  // 64 × 32 heads × 6251 blocks × 19 floats
  const cuda::AttnPlan q(many, 32);
  EXPECT_EQ(q.num_long(), 0);
  EXPECT_EQ(q.num_rows(), 64);
}

// The comparisons above can fail: the same keys visited in 32- or 64-key blocks (the CPU's
// reference with another key block) give other bits in many rows past the first block, while
// the reference with the contract's 16 gives the GPU's bits.
TEST(CudaAttention, CompanionAnotherKeyBlockChangesBits) {
  PARITY_REQUIRE_GPU();
  const Scene sc = scenes()[0];
  const Schedule s = single_shot(sc);
  const Result gpu = run_gpu(sc, s);
  for (int kb : {16, 32, 64}) {
    Result other;
    std::vector<float> q, k, v;
    pack(sc, s[0], q, k, v);
    std::vector<int64_t> positions;
    for (const Chunk& c : s[0])
      for (int i = 0; i < c.n; ++i) positions.push_back(c.start + i);
    kernels::rope_apply_at(q.data(), static_cast<int>(positions.size()), sc.nq, sc.hd, positions.data(),
                           sc.inv_freq.data());
    std::vector<float> o(q.size());
    int64_t row = 0;
    for (const Chunk& c : s[0]) {
      kernels::attention_reference(sc.layout(), sc.nq, sc.scale, q.data() + row * sc.qd(), c.n, 0,
                                   gpu.k_cache.data(), gpu.v_cache.data(),
                                   sc.tables.data() + std::size_t(c.seq) * sc.stride, o.data() + row * sc.qd(), kb);
      row += c.n;
    }
    collect(sc, s[0], o, other);
    if (kb == 16)
      EXPECT_EQ(differing_rows(gpu, other), 0);  // the contract's block: the same bits
    else
      EXPECT_GT(differing_rows(gpu, other), 50) << "key block " << kb;
  }
}

}  // namespace
}  // namespace parity
