// The replay ring's writer (exact mode): a multi-row call's last rows of every head's open cell, up to one
// cell, for the calls after it to replay (x and dt a head, B a group). One-row calls write their own row
// (the decode kernels). One block a (sequence, head), its threads over (row, element) with a batch of loads
// in flight before their stores: session 46 (H100) measured the row-at-a-time loop at ~35 µs a pass
// whatever the batch, each of its 16 rows a load's round trip before the next row's. Session 48: a row's ring
// slot follows the row before's (one remainder a block, not one an element), and aligned rows move in
// 16-byte units, so a block's x is one unit a thread and a group's B two.
#include <cstddef>
#include <cstdint>

#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

constexpr int kRingThreads = 256, kInFlight = 4;

// dst(i) = src(i) for i < n, kInFlight loads a thread before their stores (ring and inputs are different
// buffers, which the compiler cannot know).
template <class T, class Load, class Store>
__device__ void copy_batched(int n, Load load, Store store) {
  for (int base = threadIdx.x; base < n; base += kInFlight * kRingThreads) {
    T v[kInFlight];
#pragma unroll
    for (int k = 0; k < kInFlight; ++k) {
      const int i = base + k * kRingThreads;
      v[k] = i < n ? load(i) : T{};
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
  // Row r's slots: the first row's, advanced by r around the cell (r < L ≤ cell).
  const int x0 = ring_x_slot(g, h, sh.H, from), b0 = cell_mod(from, g.cell);
  auto around = [&](int s0, int r) { return s0 + r < g.cell ? s0 + r : s0 + r - g.cell; };
  auto x_at = [&](int r) { return head0 + around(x0, r); };
  // 16-byte units where every row and ring row starts on 16 bytes (the ring's rows are P or N floats apart).
  const bool units = (reinterpret_cast<std::uintptr_t>(xbc) & 15) == 0 && ld % 4 == 0 && P % 4 == 0 && N % 4 == 0;
  if (units) {
    const int PU = P / 4;
    copy_batched<float4>(
        L * PU, [&](int i) { return *reinterpret_cast<const float4*>(src.x(h, from + i / PU) + 4 * (i % PU)); },
        [&](int i, float4 v) { *reinterpret_cast<float4*>(st.ring_x + x_at(i / PU) * P + 4 * (i % PU)) = v; });
  } else {
    copy_batched<float>(
        L * P, [&](int i) { return src.x(h, from + i / P)[i % P]; },
        [&](int i, float v) { st.ring_x[x_at(i / P) * P + i % P] = v; });
  }
  copy_batched<float>(
      L, [&](int i) { return src.dtv(h, from + i); }, [&](int i, float v) { st.ring_dt[x_at(i)] = v; });
  if (h % sh.heads_per_group() != 0) return;  // a group's B rows: its first head's block
  const int grp = h / sh.heads_per_group();
  const std::size_t group0 = (static_cast<std::size_t>(src.slot) * sh.groups + grp) * g.cell;
  if (units) {
    const int NU = N / 4;
    copy_batched<float4>(
        L * NU, [&](int i) { return *reinterpret_cast<const float4*>(src.B(grp, from + i / NU) + 4 * (i % NU)); },
        [&](int i, float4 v) {
          *reinterpret_cast<float4*>(st.ring_B + (group0 + around(b0, i / NU)) * N + 4 * (i % NU)) = v;
        });
  } else {
    copy_batched<float>(
        L * N, [&](int i) { return src.B(grp, from + i / N)[i % N]; },
        [&](int i, float v) { st.ring_B[(group0 + around(b0, i / N)) * N + i % N] = v; });
  }
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
