// Causal depthwise conv1d, one thread per (row, channel): the window is the slot's last K-1
// inputs followed by the call's rows, and the sum runs bias, then taps in ascending order with
// fmaf — the order of kernels/conv1d.cpp, so prefill and decode (and the CPU) agree bit for bit.
//
// The launch also does what would otherwise be launches of a few µs each around it in a decode step
// (issue 11): ssd_dt's dt for the pass's rows (one more block per row), the gated norm's silu(z) (its
// blocks after dt's), and, when every sequence has one row, the state's advance (the thread that read a
// channel's window is then its only reader). The per-element code is shared with the unfused paths, so
// the bits are theirs.
#include <atomic>

#include "kernels/math.h"
#include "kernels_cuda/conv_row.cuh"
#include "kernels_cuda/cuda_check.h"
#include "kernels_cuda/norm_row.cuh"
#include "kernels_cuda/ops.h"
#include "kernels_cuda/programmatic_launch.cuh"

namespace parity::cuda {
namespace {

constexpr int kThreads = 256;

// Output (row j of the sequence whose rows start at packed row row0, channel c) before SiLU.
__device__ float conv_at(const float* in, int ld, int ch, const float* w, const float* bias, int K, const float* st,
                         int row0, int j, int c) {
  float acc = bias ? bias[c] : 0.0f;
  for (int i = 0; i < K; ++i) {
    const int q = j - (K - 1) + i;  // < 0: from the carried state
    const float v =
        q >= 0 ? in[static_cast<std::size_t>(row0 + q) * ld + c] : st[static_cast<std::size_t>(K - 1 + q) * ch + c];
    acc = fmaf(w[static_cast<std::size_t>(c) * K + i], v, acc);
  }
  return acc;
}

// The new state of channel c: the last K-1 inputs of [old state | the sequence's n rows], shifted in
// ascending order, so reading old[i + n] never sees an already-overwritten value.
__device__ void advance_state(const float* in, int ld, int ch, int K, float* st, int row0, int n, int c) {
  for (int i = 0; i < K - 1; ++i) {
    const int q = n - (K - 1) + i;
    st[static_cast<std::size_t>(i) * ch + c] =
        q >= 0 ? in[static_cast<std::size_t>(row0 + q) * ld + c] : st[static_cast<std::size_t>(i + n) * ch + c];
  }
}

// The launch's side jobs for packed row r: its dt (threads striding over the heads) and gate factor i.
__device__ void dt_row(const DtJob& dt, std::size_t r) {
  for (int h = threadIdx.x; h < dt.H; h += blockDim.x)
    dt.dt[r * dt.H + h] = dt_value(dt.raw[r * dt.ld + h], dt.bias[h], dt.lo, dt.hi);
}
__device__ void gate_at(const GateJob& gate, std::size_t r, int i) {
  gate.out[r * gate.width + i] = norm_row::gate_factor(gate.z[r * gate.ld + i], false);
}

// Up to this many taps a thread holds its weights and its window in registers: the loads issue
// together, before the sum, and a one-row call's new state is the window's last K-1 values. The sum
// is conv_at's: bias, then fmaf over the taps in ascending order.
constexpr int kHeldTaps = 8;

// Blocks (row, y): y < cblocks cover the channels; y == cblocks (when dt.dt is set) the row's dt; the
// gate's blocks (when gate.out is set) follow, kThreads factors silu(z) each.
// advance: every sequence has one row, so the thread of (row, c) advances the state after its read.
// state_first (ops.h's kGemmEarlyConvState): the pass's metadata and the carried state's part of the
// window are read before the wait as well. No kernel of the pass writes them after the pass's first
// launches (the metadata is copied up before it; a slot's state is this layer's, written by its conv in
// an earlier pass or zeroed at the pass's start), and by the time this launch is scheduled (when the
// in_proj GEMM before it has waited) every kernel before that GEMM has completed. The same values, the
// same operations: only the order of the loads changes. A template argument, not a run-time flag: the
// early reads cost registers (40 against 32), and prefill, whose rows rarely reach the carried state,
// runs the instantiation without them at full occupancy (conv1d() takes it only for one-row passes).
template <bool StateFirst>
__global__ void conv_kernel(const float* in, int ld, int ch, const float* w, const float* bias, int K, float* state,
                            PassSeqs p, bool silu, float* out, int cblocks, DtJob dt, GateJob gate, bool advance,
                            bool release_first) {
  const int r = blockIdx.x;
  const int c = blockIdx.y * kThreads + threadIdx.x;
  const bool channel = static_cast<int>(blockIdx.y) < cblocks && c < ch, held = K <= kHeldTaps;
  // The weights before the wait: no kernel writes them.
  float wk[kHeldTaps], win[kHeldTaps], acc = 0.0f;
  if (channel && held) {
#pragma unroll
    for (int i = 0; i < kHeldTaps; ++i)
      if (i < K) wk[i] = w[static_cast<std::size_t>(c) * K + i];
    acc = bias ? bias[c] : 0.0f;
  }
  int s = 0, row0 = 0, j = 0;
  float* st = nullptr;
  // The row's sequence and slot, and the window's taps from the carried state (q < 0).
  auto locate = [&] {
    s = p.row_seq[r];
    row0 = p.row0[s];
    j = r - row0;
    st = state + static_cast<std::size_t>(p.slot[s]) * (K - 1) * ch;
    if (StateFirst && held) {
#pragma unroll
      for (int i = 0; i < kHeldTaps; ++i) {
        const int q = j - (K - 1) + i;
        if (i < K && q < 0) win[i] = st[static_cast<std::size_t>(K - 1 + q) * ch + c];
      }
    }
  };
  if constexpr (StateFirst)
    if (channel) locate();
  // Launched programmatically (launch_after_prior); then plain mode's SSU may start loading its state
  // (early_start.h's kGemmEarlyMixerChain: before this wait).
  wait_and_release(release_first);
  const int dtb = dt.dt ? 1 : 0;
  if (dtb && static_cast<int>(blockIdx.y) == cblocks) {
    dt_row(dt, static_cast<std::size_t>(r));
    return;
  }
  if (static_cast<int>(blockIdx.y) >= cblocks + dtb) {
    const int i = (static_cast<int>(blockIdx.y) - cblocks - dtb) * kThreads + threadIdx.x;
    if (i < gate.width) gate_at(gate, static_cast<std::size_t>(r), i);
    return;
  }
  if (!channel) return;
  if constexpr (!StateFirst) locate();
  if (!held) {
    const float v = conv_at(in, ld, ch, w, bias, K, st, row0, j, c);
    out[static_cast<std::size_t>(r) * ch + c] = silu ? kernels::silu_f(v) : v;
    if (advance) advance_state(in, ld, ch, K, st, row0, 1, c);
    return;
  }
#pragma unroll
  for (int i = 0; i < kHeldTaps; ++i) {
    const int q = j - (K - 1) + i;  // >= 0: the call's rows; < 0: the carried state (read above if StateFirst)
    if constexpr (StateFirst) {
      if (i < K && q >= 0) win[i] = in[static_cast<std::size_t>(row0 + q) * ld + c];
    } else if (i < K) {
      win[i] = q >= 0 ? in[static_cast<std::size_t>(row0 + q) * ld + c] : st[static_cast<std::size_t>(K - 1 + q) * ch + c];
    }
  }
  acc = conv_held_sum(wk, win, K, acc);
  out[static_cast<std::size_t>(r) * ch + c] = silu ? kernels::silu_f(acc) : acc;
  if (advance) {  // one row: the window is [old state | the row], the new state its last K-1 values
#pragma unroll
    for (int i = 0; i + 1 < kHeldTaps; ++i)
      if (i + 1 < K) st[static_cast<std::size_t>(i) * ch + c] = win[i + 1];
  }
}

// A prefill pass's conv: each thread one channel over kTileRows consecutive packed rows, the tile's
// inputs (and the K-1 rows before it) loaded once into registers and every output's window taken from
// them, where the one-row-a-thread kernel above loads each input K times (from L2 after the first) and
// pays a block's start for every row (issue 11: 0.77 ms a layer at 8 x 2048 rows of mamba2-2.7b, 3.3x
// its bytes). A window whose taps fall before its sequence's first row takes them from the carried
// state, as conv_at does; the sum is conv_held_sum's, so the bits are the row kernel's. Blocks y past
// the channels do dt (one) and the gate factors for the tile's rows, as the row kernel's do for its row.
constexpr int kTileRows = 16;

template <int K>
__global__ void conv_tile_kernel(const float* in, int ld, int ch, const float* w, const float* bias, float* state,
                                 PassSeqs p, bool silu, float* out, int cblocks, DtJob dt, GateJob gate) {
  const int r0 = blockIdx.x * kTileRows, rows = min(kTileRows, p.num_rows - r0);
  const int c = blockIdx.y * kThreads + threadIdx.x;
  const bool channel = static_cast<int>(blockIdx.y) < cblocks && c < ch;
  float wk[K], b = 0.0f;  // the weights before the wait: no kernel writes them
  if (channel) {
#pragma unroll
    for (int i = 0; i < K; ++i) wk[i] = w[static_cast<std::size_t>(c) * K + i];
    b = bias ? bias[c] : 0.0f;
  }
  wait_and_release(false);
  const int dtb = dt.dt ? 1 : 0;
  if (dtb && static_cast<int>(blockIdx.y) == cblocks) {
    for (int i = 0; i < rows; ++i) dt_row(dt, static_cast<std::size_t>(r0 + i));
    return;
  }
  if (static_cast<int>(blockIdx.y) >= cblocks + dtb) {
    const int g = (static_cast<int>(blockIdx.y) - cblocks - dtb) * kThreads + threadIdx.x;
    if (g < gate.width)
      for (int i = 0; i < rows; ++i) gate_at(gate, static_cast<std::size_t>(r0 + i), g);
    return;
  }
  if (!channel) return;
  // x[i]: packed row r0 - (K - 1) + i; rows outside the pass (or of another sequence) are never used.
  float x[kTileRows + K - 1];
#pragma unroll
  for (int i = 0; i < kTileRows + K - 1; ++i) {
    const int row = r0 - (K - 1) + i;
    x[i] = row >= 0 && row < p.num_rows ? in[static_cast<std::size_t>(row) * ld + c] : 0.0f;
  }
#pragma unroll
  for (int i = 0; i < kTileRows; ++i) {
    if (i >= rows) break;
    const int r = r0 + i, s = p.row_seq[r], j = r - p.row0[s];
    float win[K];
#pragma unroll
    for (int t = 0; t < K; ++t) win[t] = x[i + t];
    if (j < K - 1) {  // the window starts in the carried state
      const float* st = state + static_cast<std::size_t>(p.slot[s]) * (K - 1) * ch;
#pragma unroll
      for (int t = 0; t < K; ++t) {
        const int q = j - (K - 1) + t;
        if (q < 0) win[t] = st[static_cast<std::size_t>(K - 1 + q) * ch + c];
      }
    }
    const float acc = conv_held_sum(wk, win, K, b);
    out[static_cast<std::size_t>(r) * ch + c] = silu ? kernels::silu_f(acc) : acc;
  }
}

__global__ void conv_state_kernel(const float* in, int ld, int ch, int K, float* state, PassSeqs p) {
  const int s = blockIdx.x;
  const int c = blockIdx.y * kThreads + threadIdx.x;
  float* st = state + static_cast<std::size_t>(p.slot[s]) * (K - 1) * ch;
  if (c < ch) advance_state(in, ld, ch, K, st, p.row0[s], p.n[s], c);
}

std::atomic<bool> gate_in_conv_on{true};
std::atomic<bool> conv_row_tiles_on{true};

}  // namespace

bool gate_in_conv() { return gate_in_conv_on.load(); }
void set_gate_in_conv(bool on) { gate_in_conv_on.store(on); }

bool conv_row_tiles() { return conv_row_tiles_on.load(); }
void set_conv_row_tiles(bool on) { conv_row_tiles_on.store(on); }

void conv1d(const float* in, int ld_in, int ch, const float* w, const float* bias, int K, float* conv_state,
            const PassSeqs& p, bool silu, float* out, cudaStream_t s, const DtJob* dt, const GateJob* gate) {
  if (p.num_rows <= 0) return;
  if (K < 1) throw Error("conv1d: kernel size must be at least 1");
  const int cblocks = (ch + kThreads - 1) / kThreads;
  const DtJob job = dt ? *dt : DtJob{};
  const GateJob gj = gate ? *gate : GateJob{};
  const bool advance = K > 1 && p.one_row_each;
  const unsigned yblocks =
      static_cast<unsigned>(cblocks + (job.dt ? 1 : 0) + (gj.out ? (gj.width + kThreads - 1) / kThreads : 0));
  // The early state reads only where they can pay: one-row (decode) passes, with the GEMMs' early start on.
  const bool state_first = advance && (gemm_early_flags() & kGemmEarlyConvState) != 0;
  const bool release_first = (gemm_early_flags() & kGemmEarlyMixerChain) != 0;
  // Mamba2's K = 4 over a pass with more rows than sequences: the row tiles (the same bits).
  if (K == 4 && !advance && conv_row_tiles()) {
    const unsigned tiles = static_cast<unsigned>((p.num_rows + kTileRows - 1) / kTileRows);
    launch_after_prior(conv_tile_kernel<4>, dim3(tiles, yblocks), dim3(kThreads), 0, s, "conv1d tiles", in, ld_in, ch,
                       w, bias, conv_state, p, silu, out, cblocks, job, gj);
  } else {
    launch_after_prior(state_first ? conv_kernel<true> : conv_kernel<false>, dim3(p.num_rows, yblocks),
                       dim3(kThreads), 0, s, "conv1d", in, ld_in, ch, w, bias, K, conv_state, p, silu, out, cblocks,
                       job, gj, advance, release_first);
  }
  if (K > 1 && !advance) {
    conv_state_kernel<<<dim3(p.num_seqs, cblocks), kThreads, 0, s>>>(in, ld_in, ch, K, conv_state, p);
    check_launch("conv1d state");
  }
}

}  // namespace parity::cuda
