// The GPU scan. Exact mode: every row bit-identical whatever the schedule (one call, uneven
// chunks, one row at a time, two sequences sharing passes), for both state dtypes, several cells,
// staggered or not; plain mode's rows do change with the schedule (the companion). Both modes
// against the CPU's scalar reference scan.
#include <cmath>
#include <map>

#include "kernels/ssd.h"
#include "kernels_cuda/device_buffer.h"
#include "kernels_cuda/pass_plan.h"
#include "tests/cuda/gpu_test_support.h"

namespace parity {
namespace {

constexpr int H = 8, P = 32, N = 16, G = 2, I = H * P, GN = G * N, LD = I + 2 * GN, T = 150;

struct Stream {
  std::vector<float> xbc, dt;
  explicit Stream(uint64_t seed) : xbc(test::uniform(std::size_t(T) * LD, seed)), dt(test::uniform(std::size_t(T) * H, seed + 1, 0.005f, 0.1f)) {}
};

const std::vector<float>& A_() {
  static const std::vector<float> a = [] {
    std::vector<float> v = test::uniform(H, 99, 0.5f, 2.0f);
    for (float& x : v) x = -x;
    return v;
  }();
  return a;
}
const std::vector<float>& D_() {
  static const std::vector<float> d = test::uniform(H, 98);
  return d;
}

struct Call {
  int slot;
  int64_t start;
  int n;
};

class GpuScan {
 public:
  GpuScan(cuda::ScanGrid g, bool bf16, int slots) : g_(g), bf16_(bf16) {
    const std::size_t S = std::size_t(slots) * H * P * N;
    if (bf16) {
      s16_.resize(S);
      s16_.zero();
    } else {
      s32_.resize(S);
      s32_.zero();
    }
    rx_.resize(std::size_t(slots) * H * g.cell * P);
    rdt_.resize(std::size_t(slots) * H * g.cell);
    rb_.resize(std::size_t(slots) * G * g.cell * N);
    dA_.upload(A_());
    dD_.upload(D_());
  }
  // One pass over the calls; call i reads rows [start, start+n) of streams[i], y lands in out[slot].
  void pass(const std::vector<Call>& calls, const std::vector<const Stream*>& streams) {
    std::vector<cuda::SeqSpan> spans;
    std::vector<float> xbc, dt;
    for (std::size_t i = 0; i < calls.size(); ++i) {
      const Call& c = calls[i];
      spans.push_back({c.slot, c.start, c.n});
      xbc.insert(xbc.end(), streams[i]->xbc.begin() + c.start * LD, streams[i]->xbc.begin() + (c.start + c.n) * LD);
      dt.insert(dt.end(), streams[i]->dt.begin() + c.start * H, streams[i]->dt.begin() + (c.start + c.n) * H);
    }
    const int rows = static_cast<int>(dt.size() / H);
    cuda::PassPlan plan(spans, g_);
    const cuda::PassSeqs ps = plan.upload(ints_, starts_);
    cuda::DeviceBuffer<float> dx, ddt, dy(std::size_t(rows) * I);
    scratch_.resize(std::max<std::size_t>(1, cuda::ssd_scratch_floats({H, P, N, G}, ps)));
    dx.upload(xbc);
    ddt.upload(dt);
    cuda::SsdState st;
    st.state_f32 = bf16_ ? nullptr : s32_.data();
    st.state_bf16 = bf16_ ? s16_.data() : nullptr;
    st.ring_x = rx_.data();
    st.ring_dt = rdt_.data();
    st.ring_B = rb_.data();
    cuda::ssd_scan({H, P, N, G}, g_, ps, dx.data(), LD, ddt.data(), dA_.data(), dD_.data(), st, scratch_.data(),
                   scratch_.size(), dy.data(), nullptr);
    const std::vector<float> y = dy.download(std::size_t(rows) * I);
    std::size_t r = 0;
    for (const Call& c : calls) {
      std::vector<float>& o = out[c.slot];
      o.resize(std::size_t(T) * I);
      std::copy(y.begin() + r * I, y.begin() + (r + c.n) * I, o.begin() + c.start * I);
      r += c.n;
    }
  }
  std::map<int, std::vector<float>> out;

 private:
  cuda::ScanGrid g_;
  bool bf16_;
  cuda::DeviceBuffer<float> s32_, rx_, rdt_, rb_, dA_, dD_, scratch_;
  cuda::DeviceBuffer<uint16_t> s16_;
  cuda::DeviceBuffer<int32_t> ints_;
  cuda::DeviceBuffer<int64_t> starts_;
};

// Rows of one sequence run in chunks of the given sizes, one pass per chunk.
std::vector<float> run_chunks(const cuda::ScanGrid& g, bool bf16, const Stream& s, const std::vector<int>& sizes) {
  GpuScan scan(g, bf16, 1);
  int64_t pos = 0;
  for (int n : sizes) {
    scan.pass({{0, pos, n}}, {&s});
    pos += n;
  }
  EXPECT_EQ(pos, T);
  return scan.out[0];
}

std::vector<int> uneven() { return {37, 1, 1, 64, 5, 1, 41}; }
std::vector<int> ones() { return std::vector<int>(T, 1); }

TEST(CudaSsd, ExactRowsAreBitIdenticalUnderEverySchedule) {
  PARITY_REQUIRE_GPU();
  const Stream s(11), other(12);
  for (int cell : {1, 8, 16, 32, 64, 128, 256})
    for (bool stagger : {true, false})
      for (bool bf16 : {false, true}) {
        const cuda::ScanGrid g{true, cell, stagger};
        const std::string what = "cell " + std::to_string(cell) + (stagger ? " staggered" : "") + (bf16 ? " bf16" : " f32");
        const std::vector<float> one = run_chunks(g, bf16, s, {T});
        ASSERT_TRUE(test::same_bits(one.data(), run_chunks(g, bf16, s, uneven()).data(), one.size())) << what;
        ASSERT_TRUE(test::same_bits(one.data(), run_chunks(g, bf16, s, ones()).data(), one.size())) << what;
        // Batch mix: sequence 0 decodes row by row while sequence 1 (another stream) prefills in
        // uneven chunks in the same passes, on another slot.
        GpuScan mix(g, bf16, 2);
        const std::vector<int> ch = uneven();
        int64_t p0 = 0, p1 = 0;
        std::size_t ci = 0;
        while (p0 < T || p1 < T) {
          std::vector<Call> calls;
          std::vector<const Stream*> ss;
          if (p1 < T) {
            calls.push_back({1, p1, ch[ci]});
            ss.push_back(&other);
            p1 += ch[ci++];
          }
          if (p0 < T) {
            calls.push_back({0, p0, 1});
            ss.push_back(&s);
            ++p0;
          }
          mix.pass(calls, ss);
        }
        ASSERT_TRUE(test::same_bits(one.data(), mix.out[0].data(), one.size())) << what << " batch mix";
      }
}

TEST(CudaSsd, CompanionPlainRowsDependOnTheSchedule) {
  PARITY_REQUIRE_GPU();
  const Stream s(11);
  for (int cell : {64, 256}) {
    const cuda::ScanGrid g{false, cell, false};
    const std::vector<float> one = run_chunks(g, false, s, {T});
    EXPECT_FALSE(test::same_bits(one.data(), run_chunks(g, false, s, ones()).data(), one.size())) << cell;
    EXPECT_FALSE(test::same_bits(one.data(), run_chunks(g, false, s, uneven()).data(), one.size())) << cell;
  }
}

TEST(CudaSsd, BothModesAgreeWithTheCpuReferenceScan) {
  PARITY_REQUIRE_GPU();
  const Stream s(21);
  std::vector<float> x(std::size_t(T) * I), B(std::size_t(T) * GN), C(std::size_t(T) * GN);
  for (int t = 0; t < T; ++t)
    for (int i = 0; i < LD; ++i) {
      const float v = s.xbc[std::size_t(t) * LD + i];
      if (i < I) x[std::size_t(t) * I + i] = v;
      else if (i < I + GN) B[std::size_t(t) * GN + i - I] = v;
      else C[std::size_t(t) * GN + i - I - GN] = v;
    }
  const kernels::SsdShape sh{H, P, G, N, 32};
  std::vector<float> s0(sh.state_elems(), 0.0f), fin(sh.state_elems()), ref(std::size_t(T) * I);
  kernels::ssd_scan_reference(sh, x.data(), s.dt.data(), A_().data(), B.data(), C.data(), D_().data(), T, 0, s0.data(),
                              ref.data(), nullptr, fin.data());
  double scale = 0;
  for (float v : ref) scale = std::max(scale, double(std::fabs(v)));
  struct Case {
    cuda::ScanGrid g;
    bool bf16;
    std::vector<int> sizes;
    double tol;
  };
  for (const Case& c : {Case{{true, 32, true}, false, uneven(), 2e-5}, Case{{true, 8, true}, true, ones(), 2e-2},
                        Case{{true, 16, true}, false, {T}, 2e-5}, Case{{true, 256, true}, false, uneven(), 2e-5},
                        Case{{true, 1, false}, false, uneven(), 2e-5}, Case{{false, 64, false}, false, {T}, 2e-5},
                        Case{{false, 64, false}, false, ones(), 2e-5}, Case{{false, 256, false}, false, {T}, 2e-5},
                        Case{{false, 256, false}, false, uneven(), 2e-5}}) {
    const std::vector<float> y = run_chunks(c.g, c.bf16, s, c.sizes);
    double worst = 0;
    for (std::size_t i = 0; i < y.size(); ++i) worst = std::max(worst, double(std::fabs(y[i] - ref[i])));
    EXPECT_LE(worst, c.tol * scale) << "exact " << c.g.exact << " cell " << c.g.cell << " bf16 " << c.bf16;
  }
}

}  // namespace
}  // namespace parity
