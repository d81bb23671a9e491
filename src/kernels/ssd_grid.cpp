// Exact-mode SSD on the exact grid: the multi-row call, the batched decode, the replay ring. Each
// head walks its own cells; per cell it runs ssd.cpp's row and fold routines (AVX-512, or the
// scalar twin on other ISAs), so the per-element sequences are those of ssd_internal.h.
#include "kernels/ssd_grid.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/aligned.h"
#include "common/dtype.h"
#include "common/error.h"
#include "kernels/isa.h"
#include "kernels/ssd_internal.h"
#include "kernels/ssd_shared.h"

namespace parity::kernels {

namespace {

using namespace ssd_detail;

void check_grid(const SsdShape& s, const ExactGrid& g) {
  check_shape(s);
  if (g.cell < 1 || (g.cell & (g.cell - 1)) != 0)
    throw Error("exact grid: the cell must be a power of two (got " + std::to_string(g.cell) + ")");
  if (g.nheads != s.nheads)
    throw Error("internal: exact grid built for " + std::to_string(g.nheads) + " heads, the layer has " +
                std::to_string(s.nheads));
}

// One head's boundary state as fp32 while a call works on it: the cache's own memory for an fp32
// state; for bf16 a widened copy in the thread's scratch, written back (exactly: it holds bf16
// values) by store().
class HeadState {
 public:
  // An empty GridState gives an empty HeadState (data() null; at_boundary and store do nothing).
  HeadState(const GridState& st, int h, int64_t pn) : pn_(pn) {
    if (!st.f32 && !st.bf16) return;
    if (st.f32) {
      S_ = st.f32 + h * pn;
      return;
    }
    thread_local AlignedBuffer<float> widened;
    if (widened.size() < std::size_t(pn)) widened.resize(pn);
    S_ = widened.data();
    bf_ = st.bf16 + h * pn;
    for (int64_t i = 0; i < pn; ++i) S_[i] = bf16_to_f32(bf_[i]);
  }
  float* data() { return S_; }
  // A new boundary: a bf16 state is rounded here, in every path, so every schedule sees it so.
  void at_boundary() {
    if (bf_)
      for (int64_t i = 0; i < pn_; ++i) S_[i] = bf16_to_f32(f32_to_bf16(S_[i]));
  }
  void store() {
    if (bf_)
      for (int64_t i = 0; i < pn_; ++i) bf_[i] = f32_to_bf16(S_[i]);
  }

 private:
  int64_t pn_;
  float* S_ = nullptr;
  uint16_t* bf_ = nullptr;
};

// One cell of one head: rows [0, Lc) of the cell, outputs from t_lo, fold when `fold`.
struct Cell {
  int Lc = 0, t_lo = 0;
  bool fold = false;
  const float* x = nullptr;  // row 0 of the head's x
  int64_t ldx = 0;
  const float* dt = nullptr;  // row 0 of the head's dt
  int64_t lddt = 0;
  const float* Bg = nullptr;  // row 0 of the group's B
  const float* Cg = nullptr;  // the group's C of output row t_lo
  float* yh = nullptr;        // the head's y of output row t_lo
  int64_t ldy = 0;            // row stride of C (in ldb units: same as B) and y
  const void* pf_next = nullptr;  // what the caller reads next, prefetched during the fold
  int64_t pf_bytes = 0;
  // Decode (AVX-512): CB(t_lo, s) for s = 0..t_lo, computed once for the sequence's group
  // (cb_once); null: computed here.
  const float* cb_once = nullptr;
  // Multi-row calls (AVX-512): the group's CB band (cb_band_avx512, `band_width` = the grid's cell)
  // and the band row of cell row 0 (its output row index, negative when row 0 emits nothing);
  // null: computed here.
  const float* band = nullptr;
  int band_width = 0;
  int64_t band_row0 = 0;
};

// Cells longer than this gather their x rows before the row and fold routines run.
constexpr int kGatherRows = 32;

// Cells up to this many rows fold in the row's pass at decode (row_and_fold_avx512): its s loop
// runs whole per state tile, which keeps the cell's B and dt·x rows in L1 only for short cells.
constexpr int kFusedFoldRows = 32;

// Rows and fold of one cell with the row and fold routines of ssd.cpp; the state is read by the
// rows and then, when the cell completes, replaced by the state at its end. It is S (fp32), or on
// AVX-512 S16 (bf16: the row routine widens it in registers, the fold writes it rounded), so a
// bf16 state is never copied.
void run_cell(const SsdShape& sh, int64_t ldb, float A, float D, const Cell& c, float* S, uint16_t* S16,
              bool avx512) {
  const int P = sh.headdim, N = sh.dstate;
  HeadScratch& scr = head_scratch();
  scr.reserve(std::max(c.Lc, 16), P);
  for (int s = 0; s < c.Lc; ++s) {
    scr.dtc[s] = c.dt[s * c.lddt];
    scr.dA[s] = scr.dtc[s] * A;
  }
  const bool rows = c.t_lo < c.Lc;
  if (!avx512) {
    auto xrow = [&](int s) { return c.x + s * c.ldx; };
    auto brow = [&](int s) { return c.Bg + s * ldb; };
    for (int t = c.t_lo; t < c.Lc && rows; ++t)
      reference_row(P, N, t, xrow, brow, c.Cg + (t - c.t_lo) * ldb, scr.dA.data(), scr.dtc.data(), S, D,
                    scr.sum.data(), scr.w.data(), c.yh + (t - c.t_lo) * c.ldy);
    if (c.fold)
      fold_reference_head(P, N, c.Lc, xrow, brow, scr.dA.data(), scr.dtc.data(), S, scr.sum.data());
    return;
  }
  HeadChunk k = scratch_chunk(scr, P, N);
  k.Lc = c.Lc;
  k.ldx = c.ldx;
  k.x = c.x;
  if (c.ldx != P && c.Lc > kGatherRows) {
    // Many passes over the head's x rows follow: gather them into one contiguous block (the
    // input rows are H·P floats or more apart, a stride the prefetchers do not follow). Cells of
    // up to 32 rows read theirs in place: at 8 rows the copy cost more than it saved, at 16 and
    // 32 it was even (docs/performance.md, session 19).
    for (int s = 0; s < c.Lc; ++s) std::memcpy(scr.xc.data() + int64_t(s) * scr.ppad, c.x + s * c.ldx, sizeof(float) * P);
    k.x = scr.xc.data();
    k.ldx = scr.ppad;
  }
  k.ldb = ldb;
  k.Bg = c.Bg;
  k.Sb = S;
  k.Sb16 = S16;
  k.D = D;
  k.pf_next = c.pf_next;
  k.pf_bytes = c.pf_bytes;
  if (rows) {
    // CB(t, s) of this head's cell in HeadChunk::cb's layout; one output row needs only its own.
    const int ldcb = round_up(std::max(c.Lc, 16), 16);
    thread_local AlignedBuffer<float> cb_buf;
    if (cb_buf.size() < std::size_t(c.Lc) * ldcb) cb_buf.resize(std::size_t(c.Lc) * ldcb);
    float* cb = cb_buf.data();
    k.Cg = c.Cg - c.t_lo * ldb;  // the kernels address C and y by cell row
    k.yh = c.yh - c.t_lo * c.ldy;
    k.ldy = c.ldy;
    k.out0 = 0;
    k.cb = cb;
    k.ldcb = ldcb;
    if (c.cb_once && c.t_lo == c.Lc - 1) {
      // One output row, in the row layout: CB(t, s) at cb[t * ldcb + s] reads cb_once[s] with ldcb 0.
      k.cb = c.cb_once;
      k.ldcb = 0;
    } else if (c.band) {
      // The heads of a group share CB: this cell's part of the band, in HeadChunk::cb's layout.
      const int W = c.band_width;
      auto cbv = [&](int t, int s) { return c.band[(c.band_row0 + t) * W + (W - 1) - (t - s)]; };
      const int e16 = rows16_end(c.t_lo, c.Lc);
      for (int t0 = c.t_lo; t0 < e16; t0 += 16) {
        float* blk = cb + int64_t(t0) * ldcb;
        for (int s = 0; s <= t0 + 15; ++s)
          for (int r = 0; r < 16; ++r) blk[s * 16 + r] = s <= t0 + r ? cbv(t0 + r, s) : 0.0f;  // s > t: never read
      }
      for (int t = e16; t < c.Lc; ++t)
        for (int s = 0; s <= t; ++s) cb[int64_t(t) * ldcb + s] = cbv(t, s);
    } else {
      const int e16 = rows16_end(c.t_lo, c.Lc);
      for (int t0 = c.t_lo; t0 < e16; t0 += 16)
        cb_block16_avx512(c.Bg, ldb, k.Cg + t0 * ldb, N, t0, cb + int64_t(t0) * ldcb);
      for (int t = e16; t < c.Lc; ++t) cb_row_avx512(c.Bg, ldb, k.Cg + t * ldb, N, t, cb + int64_t(t) * ldcb);
    }
    if (c.fold && c.t_lo == c.Lc - 1 && c.Lc <= kFusedFoldRows) {
      // A decode step that ends the cell: its row and the fold in one pass over the state.
      if (S16)
        row_and_fold_bf16_avx512(k, c.t_lo, S16, avx512_bf16_active());
      else
        row_and_fold_avx512(k, c.t_lo, S);
      return;
    }
    head_rows_avx512(k, c.t_lo);
  }
  if (!c.fold) return;
  if (!S16) {
    fold_avx512(k, S);
    return;
  }
  thread_local AlignedBuffer<float> tmp;  // fp32 rows between s-tiles of a long cell
  if (c.Lc > 32 && tmp.size() < std::size_t(P) * N) tmp.resize(std::size_t(P) * N);
  fold_bf16_avx512(k, S16, tmp.data(), avx512_bf16_active());
}

struct GridCall {
  SsdShape shape;
  ExactGrid grid;
  const float *x, *dt, *A, *B, *C, *D;
  int64_t pos0;
  int n, first_out;
  GridState state;
  float* y;
  int64_t ldx;  // x's row stride (y's is nheads·headdim)
  const float* band = nullptr;  // per group, (n - first_out) rows of grid.cell (AVX-512 only)
};

void check_call(const GridCall& a) {
  check_grid(a.shape, a.grid);
  if (a.n < 1 || a.first_out < 0 || a.first_out >= a.n || a.pos0 < 0)
    throw Error("ssd_scan_grid: need pos0 >= 0 and 0 <= first_out < n (n " + std::to_string(a.n) + ", first_out " +
                std::to_string(a.first_out) + ")");
  if ((a.state.f32 == nullptr) == (a.state.bf16 == nullptr))
    throw Error("ssd_scan_grid: exactly one of the fp32 and bf16 states must be given");
  for (int h = 0; h < a.shape.nheads; ++h)
    if (a.grid.cell_start(h, a.pos0 + a.first_out) < a.pos0)
      throw Error("ssd_scan_grid: head " + std::to_string(h) + "'s cell starts at " +
                  std::to_string(a.grid.cell_start(h, a.pos0 + a.first_out)) + ", before the call's first row " +
                  std::to_string(a.pos0));
}

// Head h through its cells, from the cell holding the first output row to the call's end.
void grid_head(const GridCall& a, int h, bool avx512) {
  const SsdShape& sh = a.shape;
  const int H = sh.nheads, P = sh.headdim, N = sh.dstate, g = h / (H / sh.ngroups);
  const int64_t ldx = a.ldx, ldy = int64_t(H) * P, ldb = int64_t(sh.ngroups) * N;
  const int64_t out_pos = a.pos0 + a.first_out, end = a.pos0 + a.n;
  // AVX-512 reads and writes a bf16 state in place (rounded by the fold at every boundary); the
  // scalar twin works on a widened copy rounded at every boundary, the same bits.
  uint16_t* S16 = avx512 && a.state.bf16 ? a.state.bf16 + h * int64_t(P) * N : nullptr;
  HeadState S(S16 ? GridState{nullptr, nullptr} : a.state, h, int64_t(P) * N);
  for (int64_t c0 = a.grid.cell_start(h, out_pos); c0 < end;) {
    const int64_t full_end = a.grid.cell_end(h, c0), c1 = std::min(full_end, end);
    const int64_t r0 = c0 - a.pos0;  // call row of the cell's first row
    Cell c;
    c.Lc = static_cast<int>(c1 - c0);
    c.t_lo = static_cast<int>(std::max<int64_t>(0, out_pos - c0));
    c.fold = c1 == full_end;
    c.x = a.x + r0 * ldx + int64_t(h) * P;
    c.ldx = ldx;
    c.dt = a.dt + r0 * H + h;
    c.lddt = H;
    c.Bg = a.B + r0 * ldb + int64_t(g) * N;
    const int64_t out = r0 + c.t_lo - a.first_out;  // output row of cell row t_lo
    c.Cg = a.C + out * ldb + int64_t(g) * N;
    c.yh = a.y + out * ldy + int64_t(h) * P;
    c.ldy = ldy;
    if (a.band) {
      c.band = a.band + int64_t(g) * (a.n - a.first_out) * a.grid.cell;
      c.band_width = a.grid.cell;
      c.band_row0 = r0 - a.first_out;
    }
    run_cell(sh, ldb, a.A[h], a.D[h], c, S.data(), S16, avx512);
    if (!c.fold) break;
    S.at_boundary();
    c0 = c1;
  }
  S.store();
}

void scan_grid(GridCall a, bool avx512) {
  check_call(a);
  const SsdShape& sh = a.shape;
  const double flops = double(a.n) * sh.nheads * sh.headdim * (3.0 * sh.dstate + a.grid.cell);
  const int rows = a.n - a.first_out, G = sh.ngroups, N = sh.dstate, W = a.grid.cell;
  thread_local AlignedBuffer<float> band;
  if (avx512 && sh.nheads > G) {
    // CB depends on the group, not the head: one band per group for the whole call, where every
    // head would compute its own cells' (the same dot16, so the same bits).
    const int64_t ldb = int64_t(G) * N;
    if (band.size() < std::size_t(G) * rows * W) band.resize(std::size_t(G) * rows * W);
    constexpr int kRowsPerItem = 32;
    const int per_group = (rows + kRowsPerItem - 1) / kRowsPerItem;
    float* const bd = band.data();
#pragma omp parallel for num_threads(kernels::num_threads()) schedule(static) if (flops > kParallelFlops || force_parallel())
    for (int it = 0; it < G * per_group; ++it) {
      const int g = it / per_group, i0 = (it % per_group) * kRowsPerItem, i1 = std::min(rows, i0 + kRowsPerItem);
      cb_band_avx512(a.B + int64_t(g) * N, ldb, a.C + int64_t(i0) * ldb + int64_t(g) * N, N, a.first_out + i0,
                     i1 - i0, W, bd + (int64_t(g) * rows + i0) * W);
    }
    a.band = bd;
  }
#pragma omp parallel for num_threads(kernels::num_threads()) schedule(static) if (flops > kParallelFlops || force_parallel())
  for (int h = 0; h < sh.nheads; ++h) grid_head(a, h, avx512);
}

}  // namespace

RingSizes ring_sizes(const SsdShape& s, const ExactGrid& g) {
  return {int64_t(s.nheads) * g.cell * s.headdim, int64_t(s.nheads) * g.cell, 2 * int64_t(g.cell) * s.ngroups * s.dstate};
}

void ring_put(const SsdShape& s, const ExactGrid& g, const ReplayRing& ring, int64_t pos, const float* x,
              const float* dt, const float* B) {
  const int64_t GN = int64_t(s.ngroups) * s.dstate;
  for (int h = 0; h < s.nheads; ++h) {
    const int slot = g.ring_slot(h, pos);
    std::memcpy(ring.x + (int64_t(h) * g.cell + slot) * s.headdim, x + int64_t(h) * s.headdim,
                sizeof(float) * s.headdim);
    ring.dt[int64_t(h) * g.cell + slot] = dt[h];
  }
  const int64_t b = pos % g.cell;
  std::memcpy(ring.B + b * GN, B, sizeof(float) * GN);
  std::memcpy(ring.B + (b + g.cell) * GN, B, sizeof(float) * GN);
}

void ring_get(const SsdShape& s, const ExactGrid& g, const ReplayRing& ring, int64_t pos, float* x, float* dt,
              float* B) {
  const int64_t GN = int64_t(s.ngroups) * s.dstate;
  for (int h = 0; h < s.nheads; ++h) {
    const int slot = g.ring_slot(h, pos);
    std::memcpy(x + int64_t(h) * s.headdim, ring.x + (int64_t(h) * g.cell + slot) * s.headdim,
                sizeof(float) * s.headdim);
    dt[h] = ring.dt[int64_t(h) * g.cell + slot];
  }
  std::memcpy(B, ring.B + (pos % g.cell) * GN, sizeof(float) * GN);
}

int grid_refeed_rows(const ExactGrid& grid, int nheads, int64_t start) {
  int64_t r = 0;
  for (int h = 0; h < nheads; ++h) r = std::max(r, start - grid.cell_start(h, start));
  return static_cast<int>(r);
}

void ssd_scan_grid(const SsdShape& shape, const ExactGrid& grid, const float* x, const float* dt, const float* A,
                   const float* B, const float* C, const float* D, int64_t pos0, int n, int first_out,
                   GridState state, float* y, int64_t x_stride) {
  scan_grid({shape, grid, x, dt, A, B, C, D, pos0, n, first_out, state, y, x_stride_or_packed(shape, x_stride)},
            active_isa() == Isa::Avx512);
}

void ssd_scan_grid_reference(const SsdShape& shape, const ExactGrid& grid, const float* x, const float* dt,
                             const float* A, const float* B, const float* C, const float* D, int64_t pos0, int n,
                             int first_out, GridState state, float* y, int64_t x_stride) {
  const GridCall a{shape, grid, x, dt, A, B, C, D, pos0, n, first_out, state, y, x_stride_or_packed(shape, x_stride)};
  check_call(a);
  for (int h = 0; h < shape.nheads; ++h) grid_head(a, h, false);
}

void ssd_grid_decode(const SsdShape& shape, const ExactGrid& grid, const float* A, const float* D,
                     const GridDecodeRow* rows, int count) {
  check_grid(shape, grid);
  for (int i = 0; i < count; ++i)
    if (rows[i].pos < 0 || (rows[i].state.f32 == nullptr) == (rows[i].state.bf16 == nullptr))
      throw Error("ssd_grid_decode: row " + std::to_string(i) +
                  " needs a position >= 0 and exactly one of the fp32 and bf16 states");
  if (count == 0) return;
  const int H = shape.nheads, P = shape.headdim, N = shape.dstate, hpg = H / shape.ngroups, G = grid.cell;
  const int64_t ldb = int64_t(shape.ngroups) * N, pn = int64_t(P) * N;
  const bool avx512 = active_isa() == Isa::Avx512;
  // CB(pos, s) = dot16(C_pos, B_s) depends on the group, not the head: once per (sequence, group),
  // for the positions from the earliest cell start of any head to pos (at most G of them, one run of
  // the B ring), instead of once per head. The same dot16, so the same bits; each head reads its
  // cell's part.
  const int ldq = round_up(G, 16);
  thread_local AlignedBuffer<float> cb_once_buf;
  std::vector<int64_t> q0(avx512 ? count : 0);
  if (avx512) {
    if (cb_once_buf.size() < std::size_t(count) * shape.ngroups * ldq)
      cb_once_buf.resize(std::size_t(count) * shape.ngroups * ldq);
    for (int i = 0; i < count; ++i) {
      const GridDecodeRow& r = rows[i];
      q0[i] = r.pos;
      for (int h = 0; h < H; ++h) q0[i] = std::min(q0[i], grid.cell_start(h, r.pos));
      for (int g = 0; g < shape.ngroups; ++g)
        cb_row_avx512(r.b_ring + (q0[i] % G) * ldb + int64_t(g) * N, ldb, r.C + int64_t(g) * N, N,
                      static_cast<int>(r.pos - q0[i]), cb_once_buf.data() + (int64_t(i) * shape.ngroups + g) * ldq);
    }
  }
  const float* cb_once = cb_once_buf.data();
  const double flops = double(count) * H * pn * 3.0;
#pragma omp parallel for num_threads(kernels::num_threads()) schedule(static) if (flops > kParallelFlops || force_parallel())
  for (int it = 0; it < count * H; ++it) {
    const GridDecodeRow& r = rows[it / H];
    const int h = it % H, g = h / hpg;
    const int64_t b = grid.cell_start(h, r.pos);
    const int slot = grid.ring_slot(h, b);
    Cell c;
    c.Lc = static_cast<int>(r.pos - b) + 1;
    c.t_lo = c.Lc - 1;
    c.fold = r.pos + 1 == grid.cell_end(h, b);
    c.x = r.x_ring + (int64_t(h) * G + slot) * P;
    c.ldx = P;
    c.dt = r.dt_ring + int64_t(h) * G + slot;
    c.lddt = 1;
    c.Bg = r.b_ring + (b % G) * ldb + int64_t(g) * N;
    c.Cg = r.C + int64_t(g) * N;
    c.yh = r.y + int64_t(h) * P;
    c.ldy = 0;
    if (avx512) c.cb_once = cb_once + (int64_t(it / H) * shape.ngroups + g) * ldq + (b - q0[it / H]);
    // The head's ring rows (contiguous) are read after the state term: ask for them now, so they
    // arrive while the state streams.
    const char* xr = reinterpret_cast<const char*>(c.x);
    for (int64_t o = 0; o < int64_t(c.Lc) * P * int64_t(sizeof(float)); o += 64) __builtin_prefetch(xr + o);
    if (c.fold && it + 1 < count * H) {
      // The fold is arithmetic on data already in cache, during which no memory traffic would be
      // in flight: the next item's state is asked for meanwhile (its dots then read it from L1).
      const GridDecodeRow& rn = rows[(it + 1) / H];
      const int64_t hn = (it + 1) % H;
      c.pf_next = rn.state.bf16 ? static_cast<const void*>(rn.state.bf16 + hn * pn)
                                : static_cast<const void*>(rn.state.f32 + hn * pn);
      c.pf_bytes = pn * (rn.state.bf16 ? 2 : 4);
    }
    if (avx512 && r.state.bf16) {
      run_cell(shape, ldb, A[h], D[h], c, nullptr, r.state.bf16 + h * pn, avx512);
      continue;
    }
    HeadState S(r.state, h, pn);
    run_cell(shape, ldb, A[h], D[h], c, S.data(), nullptr, avx512);
    if (c.fold) {
      S.at_boundary();
      S.store();
    }
  }
}

}  // namespace parity::kernels
