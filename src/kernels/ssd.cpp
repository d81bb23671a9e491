// SSD scan and SSU step: argument checks, ISA dispatch, and the plain scalar twin. The evaluation
// order every path follows is written down once, in ssd_internal.h.
#include "kernels/ssd.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "common/aligned.h"
#include "common/dtype.h"
#include "common/error.h"
#include "kernels/isa.h"
#include "kernels/math.h"
#include "kernels/ssd_internal.h"
#include "kernels/ssd_shared.h"

namespace parity::kernels {

namespace {

using ssd_detail::check_shape;
using ssd_detail::decay_f;
using ssd_detail::dot16;
using ssd_detail::head_scratch;
using ssd_detail::HeadChunk;
using ssd_detail::HeadScratch;
using ssd_detail::kParallelFlops;
using ssd_detail::reference_row;
using ssd_detail::round_up;
using ssd_detail::ScanArgs;
using ssd_detail::scratch_chunk;
using ssd_detail::fold_reference_head;

void check_scan(const ScanArgs& a) {
  check_shape(a.shape);
  if (a.n < 0 || a.first_out < 0 || a.first_out > a.n) {
    throw Error("ssd_scan: need 0 <= first_out <= n (n " + std::to_string(a.n) + ", first_out " +
                std::to_string(a.first_out) + ")");
  }
}

// One head over all chunks of the call, in the order of ssd_internal.h, with nothing shared
// between heads and no vector code: the readable statement of the arithmetic.
void reference_head(const ScanArgs& a, int h) {
  const SsdShape& sh = a.shape;
  const int H = sh.nheads, P = sh.headdim, N = sh.dstate, L = sh.chunk_size;
  const int g = h / (H / sh.ngroups);
  const int64_t ldy = int64_t(H) * P, ldb = int64_t(sh.ngroups) * N, pn = int64_t(P) * N;
  const float Ah = a.A[h], Dh = a.D[h];

  std::vector<float> S(a.s0 + h * pn, a.s0 + (h + 1) * pn);
  std::vector<float> dA(L), dtc(L), sum(L + 1), w(L);
  const int nchunks = (a.n + L - 1) / L;
  for (int c = 0; c < nchunks; ++c) {
    const int c0 = c * L;
    const int Lc = std::min(L, a.n - c0);
    const bool complete = Lc == L;
    for (int s = 0; s < Lc; ++s) {
      dtc[s] = a.dt[int64_t(c0 + s) * H + h];
      dA[s] = dtc[s] * Ah;
    }
    auto xrow = [&](int s) { return a.x + int64_t(c0 + s) * a.ldx + int64_t(h) * P; };
    auto brow = [&](int s) { return a.B + int64_t(c0 + s) * ldb + int64_t(g) * N; };

    for (int t = std::max(0, a.first_out - c0); t < Lc; ++t) {
      const int64_t out = c0 + t - a.first_out;
      reference_row(P, N, t, xrow, brow, a.C + out * ldb + int64_t(g) * N, dA.data(), dtc.data(), S.data(), Dh,
                    sum.data(), w.data(), a.y + out * ldy + int64_t(h) * P);
    }

    // The output rows above read the boundary state, so the fold runs after them.
    if (complete || a.final_state) {  // a partial chunk is always the last one
      fold_reference_head(P, N, Lc, xrow, brow, dA.data(), dtc.data(), S.data(), sum.data());
      if (complete && a.chunk_states) {
        std::memcpy(a.chunk_states + (int64_t(c) * H + h) * pn, S.data(), sizeof(float) * pn);
      }
    }
  }
  if (a.final_state) std::memcpy(a.final_state + h * pn, S.data(), sizeof(float) * pn);
}

void ssu_reference_head(int P, int N, const float* x, float dt, float A, float D, const float* B, const float* C,
                        float* S, float* y) {
  const float decay = exp_f(dt * A);
  for (int p = 0; p < P; ++p) {
    const float u = dt * x[p];
    float* Sp = S + int64_t(p) * N;
    for (int k = 0; k < N; ++k) Sp[k] = std::fma(u, B[k], decay * Sp[k]);
    y[p] = std::fma(D, x[p], dot16(Sp, C, N));
  }
}

// The chunk loop of the optimized path. Per chunk: CB(t, s) once per group (shared by the
// group's heads), then per head the output rows (row routine) and the chunk-end state (fold).
// Chunks run in order because each starts from the previous one's state; inside a chunk the
// parallel items (rows of CB, heads) write disjoint outputs.
void scan_optimized(const ScanArgs& a) {
  const SsdShape& sh = a.shape;
  const int H = sh.nheads, P = sh.headdim, G = sh.ngroups, N = sh.dstate, L = sh.chunk_size;
  const int hpg = H / G;
  const int64_t ldx = a.ldx, ldy = int64_t(H) * P, ldb = int64_t(G) * N, pn = int64_t(P) * N,
                hpn = int64_t(H) * pn;
  const int nthreads = kernels::num_threads();
  if (a.n == 0) {
    if (a.final_state) std::memcpy(a.final_state, a.s0, sizeof(float) * hpn);
    return;
  }
  const int nchunks = (a.n + L - 1) / L;
  const int ldcb = round_up(L, 16);
  // Buffers of the calling thread, shared read-only (CB) or by disjoint head slices (state).
  // Inside the parallel regions a thread_local name would mean the worker's own copy, so only
  // pointers go in.
  thread_local AlignedBuffer<float> cb_buf, work;
  if (a.first_out < a.n && cb_buf.size() < size_t(G) * L * ldcb) cb_buf.resize(size_t(G) * L * ldcb);
  float* const cb_all = cb_buf.data();

  const float* Sb = a.s0;
  for (int c = 0; c < nchunks; ++c) {
    const int c0 = c * L;
    const int Lc = std::min(L, a.n - c0);
    const bool last = c == nchunks - 1, complete = Lc == L;
    const int t_lo = std::max(0, a.first_out - c0);
    const bool do_fold = complete ? (!last || a.chunk_states || a.final_state) : a.final_state != nullptr;
    float* dst = nullptr;
    if (do_fold) {
      if (complete && a.chunk_states) {
        dst = a.chunk_states + int64_t(c) * hpn;
      } else if (last) {
        dst = a.final_state;
      } else {
        if (work.size() < size_t(hpn)) work.resize(hpn);
        dst = work.data();
      }
    }
    const int64_t out0 = int64_t(c0) - a.first_out;
    const float* Bc = a.B + int64_t(c0) * ldb;

    if (t_lo < Lc) {
      // Items: the 16-row blocks and the single rows after them, per group (HeadChunk::cb).
      const int e16 = ssd_detail::rows16_end(t_lo, Lc);
      const int per_group = (e16 - t_lo) / 16 + (Lc - e16);
      const int items = G * per_group;
      const double flops = double(Lc - t_lo) * (t_lo + (Lc - t_lo) / 2 + 16) * N * G;
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1) if (flops > kParallelFlops || force_parallel())
      for (int it = 0; it < items; ++it) {
        const int g = it / per_group, j = it % per_group;
        const float* Bg = Bc + int64_t(g) * N;
        float* cbg = cb_all + size_t(g) * L * ldcb;
        if (t_lo + 16 * j < e16) {
          const int t0 = t_lo + 16 * j;
          ssd_detail::cb_block16_avx512(Bg, ldb, a.C + (out0 + t0) * ldb + int64_t(g) * N, N, t0,
                                        cbg + size_t(t0) * ldcb);
        } else {
          const int t = e16 + (j - (e16 - t_lo) / 16);
          ssd_detail::cb_row_avx512(Bg, ldb, a.C + (out0 + t) * ldb + int64_t(g) * N, N, t, cbg + size_t(t) * ldcb);
        }
      }
    }

    if (t_lo < Lc || do_fold) {
      // Rough multiply-adds of this chunk: boundary term and intra sum of the output rows, fold.
      const double head_flops = double(Lc - t_lo) * P * (N + Lc) + (do_fold ? 2.0 * Lc * P * N : 0.0);
#pragma omp parallel for num_threads(nthreads) schedule(static) if (head_flops * H > kParallelFlops || force_parallel())
      for (int h = 0; h < H; ++h) {
        HeadScratch& scr = head_scratch();
        scr.reserve(L, P);
        const int g = h / hpg;
        const float Ah = a.A[h];
        for (int s = 0; s < Lc; ++s) {
          const float d = a.dt[int64_t(c0 + s) * H + h];
          scr.dtc[s] = d;
          scr.dA[s] = d * Ah;
        }
        HeadChunk k = scratch_chunk(scr, P, N);
        k.Lc = Lc;
        k.ldx = ldx;
        k.ldb = ldb;
        k.ldy = ldy;
        k.x = a.x + int64_t(c0) * ldx + int64_t(h) * P;
        if (Lc - t_lo >= 16 || do_fold) {
          // Many passes over this head's x rows follow: gather them into one contiguous block
          // (the input rows are H*P or more floats apart, a stride the prefetchers do not follow).
          for (int s = 0; s < Lc; ++s) std::memcpy(scr.xc.data() + int64_t(s) * scr.ppad, k.x + s * ldx, sizeof(float) * P);
          k.x = scr.xc.data();
          k.ldx = scr.ppad;
        }
        k.Bg = Bc + int64_t(g) * N;
        k.Cg = a.C + int64_t(g) * N;
        k.yh = a.y + int64_t(h) * P;
        k.out0 = out0;
        k.cb = cb_all + size_t(g) * L * ldcb;
        k.ldcb = ldcb;
        k.Sb = Sb + int64_t(h) * pn;
        k.D = a.D[h];
        if (t_lo < Lc) ssd_detail::head_rows_avx512(k, t_lo);
        if (do_fold) ssd_detail::fold_avx512(k, dst + int64_t(h) * pn);
      }
    }
    Sb = dst;
  }
  if (a.final_state && a.n % L == 0 && a.chunk_states) {
    std::memcpy(a.final_state, a.chunk_states + int64_t(nchunks - 1) * hpn, sizeof(float) * hpn);
  }
}

}  // namespace

void ssd_scan(const SsdShape& shape, const float* x, const float* dt, const float* A, const float* B,
              const float* C, const float* D, int n, int first_out, const float* s0, float* y,
              float* chunk_states, float* final_state, int64_t x_stride) {
  const ScanArgs a{shape, x, dt, A, B, C, D, n, first_out, s0, y, chunk_states, final_state,
                   ssd_detail::x_stride_or_packed(shape, x_stride)};
  check_scan(a);
  if (active_isa() == Isa::Avx512) {
    scan_optimized(a);
    return;
  }
  // Without AVX-512 the heads run the scalar twin; AVX2 gets no SSD path of its own yet.
#pragma omp parallel for num_threads(kernels::num_threads()) schedule(static)
  for (int h = 0; h < shape.nheads; ++h) reference_head(a, h);
}

void ssd_scan_reference(const SsdShape& shape, const float* x, const float* dt, const float* A,
                        const float* B, const float* C, const float* D, int n, int first_out,
                        const float* s0, float* y, float* chunk_states, float* final_state, int64_t x_stride) {
  const ScanArgs a{shape, x, dt, A, B, C, D, n, first_out, s0, y, chunk_states, final_state,
                   ssd_detail::x_stride_or_packed(shape, x_stride)};
  check_scan(a);
  for (int h = 0; h < shape.nheads; ++h) reference_head(a, h);
}

void ssu_step(const SsdShape& shape, const float* x, const float* dt, const float* A, const float* B,
              const float* C, const float* D, float* state, float* y) {
  check_shape(shape);
  const int H = shape.nheads, P = shape.headdim, N = shape.dstate, hpg = H / shape.ngroups;
  const auto head_fn = active_isa() == Isa::Avx512 ? ssd_detail::ssu_head_avx512 : ssu_reference_head;
  const double flops = 2.0 * H * P * N;
#pragma omp parallel for num_threads(kernels::num_threads()) schedule(static) if (flops > kParallelFlops || force_parallel())
  for (int h = 0; h < H; ++h) {
    const int64_t g = h / hpg;
    head_fn(P, N, x + int64_t(h) * P, dt[h], A[h], D[h], B + g * N, C + g * N, state + int64_t(h) * P * N,
            y + int64_t(h) * P);
  }
}

void ssu_step_bf16(const SsdShape& shape, const float* x, const float* dt, const float* A, const float* B,
                   const float* C, const float* D, uint16_t* state, float* y) {
  check_shape(shape);
  const int H = shape.nheads, P = shape.headdim, N = shape.dstate, hpg = H / shape.ngroups;
  const bool avx512 = active_isa() == Isa::Avx512, hw = avx512 && avx512_bf16_active();
  const double flops = 2.0 * H * P * N;
#pragma omp parallel for num_threads(kernels::num_threads()) schedule(static) if (flops > kParallelFlops || force_parallel())
  for (int h = 0; h < H; ++h) {
    const int64_t g = h / hpg;
    uint16_t* Sh = state + int64_t(h) * P * N;
    if (avx512) {
      ssd_detail::ssu_head_bf16_avx512(P, N, x + int64_t(h) * P, dt[h], A[h], D[h], B + g * N, C + g * N, Sh,
                                       y + int64_t(h) * P, hw);
    } else {
      thread_local AlignedBuffer<float> scratch;
      const std::size_t need = std::size_t(P) * N;
      if (scratch.size() < need) scratch.resize(need);
      for (int64_t i = 0; i < int64_t(P) * N; ++i) scratch[i] = bf16_to_f32(Sh[i]);
      ssu_reference_head(P, N, x + int64_t(h) * P, dt[h], A[h], D[h], B + g * N, C + g * N, scratch.data(),
                         y + int64_t(h) * P);
      for (int64_t i = 0; i < int64_t(P) * N; ++i) Sh[i] = f32_to_bf16(scratch[i]);
    }
  }
}

}  // namespace parity::kernels
