// The replay ring's writer (exact mode): a multi-row call's last rows of every head's open cell, up to one
// cell, for the calls after it to replay (x and dt a head, B a group). One-row calls write their own row
// (the decode kernels). One block a (sequence, head), its threads over (row, element) with a batch of loads
// in flight before their stores: session 46 (H100) measured the row-at-a-time loop at ~35 µs a pass
// whatever the batch, each of its 16 rows a load's round trip before the next row's.
#include <cstdint>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kRingThreads = 256, kInFlight = 4;

// dst(i) = src(i) for i < n, kInFlight loads a thread before their stores (ring and inputs are different
// buffers, which the compiler cannot know).
template <class Load, class Store>
__device__ void copy_batched(int n, Load load, Store store) {
  for (int base = threadIdx.x; base < n; base += kInFlight * kRingThreads) {
    float v[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const int i = base + k * kRingThreads;
      v[k] = i < n ? load(i) : 0.0f;
    }
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const int i = base + k * kRingThreads;
      if (i < n) store(i, v[k]);
    }
  }
}

__global__ void __launch_bounds__(kRingThreads)
    ring_kernel(SsdShape sh, ScanGrid g, PassSeqs p, const float* xbc, int ld, const float* dt, SsdState st) {
  const int seq = blockIdx.x, h = blockIdx.y;
  if (uses_decode_row(g, p.n[seq])) return;  // the decode kernel wrote its row
  const int64_t start = p.start[seq], end = start + p.n[seq];
  const int64_t from = end - g.cell > start ? end - g.cell : start;
  const int L = static_cast<int>(end - from), P = sh.P, N = sh.N;
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const std::size_t head0 = (static_cast<std::size_t>(src.slot) * sh.H + h) * g.cell;
  auto x_at = [&](int64_t t) { return head0 + ring_x_slot(g, h, sh.H, t); };
  copy_batched(
      L * P, [&](int i) { return src.x(h, from + i / P)[i % P]; },
      [&](int i, float v) { st.ring_x[x_at(from + i / P) * P + i % P] = v; });
  copy_batched(
      L, [&](int i) { return src.dtv(h, from + i); }, [&](int i, float v) { st.ring_dt[x_at(from + i)] = v; });
  if (h % sh.heads_per_group() != 0) return;  // a group's B rows: its first head's block
  const int grp = h / sh.heads_per_group();
  const std::size_t group0 = (static_cast<std::size_t>(src.slot) * sh.groups + grp) * g.cell;
  copy_batched(
      L * N, [&](int i) { return src.B(grp, from + i / N)[i % N]; },
      [&](int i, float v) { st.ring_B[(group0 + (from + i / N) % g.cell) * N + i % N] = v; });
}

}  // namespace

void launch_ring(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld, const float* dt,
                 const SsdState& st, cudaStream_t s) {
  if (!g.exact || p.num_seqs <= 0) return;
  ring_kernel<<<dim3(static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(sh.H)), kRingThreads, 0, s>>>(
      sh, g, p, xbc, ld, dt, st);
  check_launch("ssd ring");
}

}  // namespace parity::cuda::ssd
