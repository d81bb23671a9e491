#pragma once
// The replay ring's writer (exact mode): a multi-row call's last rows of every head's open cell, up to one
// cell, for the calls after it to replay (x and dt a head, B a group). ring_kernel (ssd_ring.cu) runs it a
// (sequence, head) after the walk; the relay (ssd_tc_relay.cu) runs it in its own blocks once they have read the
// old ring, a (sequence, head, 16 columns of p) each. Copies only: who writes a value changes no bit.
// Threads go over (row, element) with a batch of loads in flight before their stores: session 46 (H100)
// measured the row-at-a-time loop at ~35 µs a pass whatever the batch, each of its 16 rows a load's round trip
// before the next row's. Session 48: a row's ring slot follows the row before's (one remainder a block, not one
// an element), and aligned rows move in 16-byte units, so a block's x is one unit a thread and a group's B two.
#include <cstddef>
#include <cstdint>

#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kRingInFlight = 4;

// dst(i) = src(i) for i < n by threads tid of T (a constant: the loop's stride), kRingInFlight loads a thread before their stores (ring and
// inputs are different buffers, which the compiler cannot know).
template <int T, class V, class Load, class Store>
__device__ void copy_batched(int n, int tid, Load load, Store store) {
  for (int base = tid; base < n; base += kRingInFlight * T) {
    V v[kRingInFlight];
#pragma unroll
    for (int k = 0; k < kRingInFlight; ++k) {
      const int i = base + k * T;
      v[k] = i < n ? load(i) : V{};
    }
#pragma unroll
    for (int k = 0; k < kRingInFlight; ++k) {
      const int i = base + k * T;
      if (i < n) store(i, v[k]);
    }
  }
}

// Sequence seq's ring rows of head h: x columns c0 .. c0 + cols − 1, and with `whole` (one writer a head) its dt
// and, at the group's first head, the group's B. Nothing for one-row calls (the decode kernels write their row).
template <int T>
__device__ void write_ring(const SsdShape& sh, const ScanGrid& g, const PassSeqs& p, const float* xbc, int ld,
                           const float* dt, const SsdState& st, int seq, int h, int c0, int cols, bool whole, int tid) {
  if (uses_decode_row(g, p.n[seq])) return;
  const int64_t start = p.start[seq], end = start + p.n[seq];
  const int64_t from = end - g.cell > start ? end - g.cell : start;
  const int L = static_cast<int>(end - from), P = sh.P, N = sh.N;
  const RowSource src = source_of(sh, g, p, seq, xbc, ld, dt, st);
  const std::size_t head0 = (static_cast<std::size_t>(src.slot) * sh.H + h) * g.cell;
  // Row r's slots: the first row's, advanced by r around the cell (r < L ≤ cell).
  const int x0 = ring_x_slot(g, h, sh.H, from), b0 = cell_mod(from, g.cell);
  auto around = [&](int s0, int r) { return s0 + r < g.cell ? s0 + r : s0 + r - g.cell; };
  auto x_at = [&](int r) { return head0 + around(x0, r); };
  // 16-byte units where every row and ring row starts on 16 bytes (the ring's rows are P or N floats apart).
  const bool units =
      (reinterpret_cast<std::uintptr_t>(xbc) & 15) == 0 && ld % 4 == 0 && P % 4 == 0 && N % 4 == 0 && c0 % 4 == 0 &&
      cols % 4 == 0;
  if (units) {
    const int CU = cols / 4;
    copy_batched<T, float4>(
        L * CU, tid,
        [&](int i) { return *reinterpret_cast<const float4*>(src.x(h, from + i / CU) + c0 + 4 * (i % CU)); },
        [&](int i, float4 v) { *reinterpret_cast<float4*>(st.ring_x + x_at(i / CU) * P + c0 + 4 * (i % CU)) = v; });
  } else {
    copy_batched<T, float>(
        L * cols, tid, [&](int i) { return src.x(h, from + i / cols)[c0 + i % cols]; },
        [&](int i, float v) { st.ring_x[x_at(i / cols) * P + c0 + i % cols] = v; });
  }
  if (!whole) return;
  copy_batched<T, float>(
      L, tid, [&](int i) { return src.dtv(h, from + i); }, [&](int i, float v) { st.ring_dt[x_at(i)] = v; });
  if (h % sh.heads_per_group() != 0) return;  // a group's B rows: its first head's writer
  const int grp = h / sh.heads_per_group();
  const std::size_t group0 = (static_cast<std::size_t>(src.slot) * sh.groups + grp) * g.cell;
  if (units) {
    const int NU = N / 4;
    copy_batched<T, float4>(
        L * NU, tid,
        [&](int i) { return *reinterpret_cast<const float4*>(src.B(grp, from + i / NU) + 4 * (i % NU)); },
        [&](int i, float4 v) {
          *reinterpret_cast<float4*>(st.ring_B + (group0 + around(b0, i / NU)) * N + 4 * (i % NU)) = v;
        });
  } else {
    copy_batched<T, float>(
        L * N, tid, [&](int i) { return src.B(grp, from + i / N)[i % N]; },
        [&](int i, float v) { st.ring_B[(group0 + around(b0, i / N)) * N + i % N] = v; });
  }
}

}  // namespace
}  // namespace parity::cuda::ssd
