// Packing, the tile/thread split, the portable kernel and the scalar reference. The SIMD
// micro-kernels are in gemm_avx2.cpp and gemm_avx512.cpp. Every path computes each C element as
// the same FMA chain (gemm.h), so which one runs, and how the work is cut, never shows in the bits.
#include "kernels/gemm.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "common/error.h"
#include "kernels/gemm_internal.h"
#include "kernels/isa.h"

namespace parity::kernels {

using detail::kNr;

namespace {

float widen(const void* w, DType dtype, std::size_t i) {
  switch (dtype) {
    case DType::F32: return static_cast<const float*>(w)[i];
    case DType::BF16: return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
    case DType::F16: return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
    default: break;
  }
  throw Error(std::string("GEMM weights must be F32, BF16 or F16, got ") + dtype_name(dtype));
}

void check_dtype(DType dtype) {
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16) {
    throw Error(std::string("GEMM weights must be F32, BF16 or F16, got ") + dtype_name(dtype));
  }
}

template <typename T>
void pack_panels(const T* src, int n, int k, DType dtype, T* dst) {
  const int panels = (n + kNr - 1) / kNr;
  int pos[kNr];
  for (int j = 0; j < kNr; ++j) pos[j] = detail::packed_pos(dtype, j);
#pragma omp parallel for schedule(static) num_threads(num_threads())
  for (int p = 0; p < panels; ++p) {
    T* panel = dst + static_cast<std::size_t>(p) * k * kNr;
    for (int j = 0; j < kNr; ++j) {
      const int col = p * kNr + j;
      if (col < n) {
        const T* row = src + static_cast<std::size_t>(col) * k;
        for (int kk = 0; kk < k; ++kk) panel[static_cast<std::size_t>(kk) * kNr + pos[j]] = row[kk];
      } else {
        for (int kk = 0; kk < k; ++kk) panel[static_cast<std::size_t>(kk) * kNr + pos[j]] = T{};
      }
    }
  }
}

using TileFn = void (*)(const float*, int, const PackedWeight&, const float*, float*, int, int, int, int, int);

TileFn tile_fn(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return detail::gemm_tile_avx512;
    case Isa::Avx2: return detail::gemm_tile_avx2;
    case Isa::Portable: break;
  }
  return detail::gemm_tile_portable;
}

}  // namespace

PackedWeight pack_weight(const void* w, DType dtype, int n, int k) {
  check_dtype(dtype);
  if (n < 0 || k < 0) throw Error("pack_weight: negative shape");
  PackedWeight pw;
  pw.n = n;
  pw.k = k;
  pw.dtype = dtype;
  const std::size_t panels = (static_cast<std::size_t>(n) + kNr - 1) / kNr;
  pw.data.resize(panels * static_cast<std::size_t>(k) * kNr * dtype_size(dtype));
  if (pw.data.size() == 0) return pw;
  if (dtype == DType::F32) {
    pack_panels(static_cast<const float*>(w), n, k, dtype, reinterpret_cast<float*>(pw.data.data()));
  } else {
    pack_panels(static_cast<const uint16_t*>(w), n, k, dtype, reinterpret_cast<uint16_t*>(pw.data.data()));
  }
  return pw;
}

void gemm(const float* a, int m, int lda, const PackedWeight& w, const float* bias, float* c, int ldc) {
  if (m <= 0 || w.n <= 0) return;
  const TileFn fn = tile_fn(active_isa());
  const int panels = (w.n + kNr - 1) / kNr;

  // Tiles are (a run of rows) × (a run of panels). Columns are split first: each thread then owns
  // column strips and streams its share of the weights, while all threads read the (much smaller,
  // shared) A. Rows are split too only when there are fewer panels than threads. The strips are
  // handed out as threads come free (a core slowed by another tenant, or a smaller core, takes
  // fewer), several a thread. None of this touches the order of any element's K chain.
  constexpr int kRowQuantum = 6;  // the AVX-512 kernel's row block: keeps row splits on its boundary
  constexpr int kStripsPerThread = 8;
  // Many-row units are a row chunk's panels in 2·nt runs: 4·nt and 8·nt lost 2-16 % at M = 512 on
  // the Zen 5 (each run starts on weights its thread did not ask ahead for; docs/performance.md).
  constexpr int kWideUnitsPerThread = 2;
  int nt = num_threads();
  const double flops = 2.0 * m * static_cast<double>(w.n) * std::max(w.k, 1);
  if (flops < 2.0e5 && !force_parallel()) nt = 1;  // a parallel region costs more than the work
  if (nt > 1 && active_isa() == Isa::Avx512 && m >= detail::kWideRows && panels >= nt) {
    // The many-row kernel packs A once per row chunk and thread; it takes its units itself.
    detail::gemm_wide_avx512_dynamic(a, lda, w, bias, c, ldc, m, nt, kWideUnitsPerThread);
    return;
  }
  // Strips of whole groups of kPanelGroup panels (the narrow kernels' unit and prefetch stride).
  constexpr int kPanelGroup = 4;
  const int groups = (panels + kPanelGroup - 1) / kPanelGroup;
  const int strip = kPanelGroup * std::max(1, groups / std::max(1, nt * kStripsPerThread));
  const int col_splits = nt > 1 ? (panels + strip - 1) / strip : 1;
  int row_splits = 1;
  if (col_splits < nt) row_splits = std::min((nt + col_splits - 1) / col_splits, (m + kRowQuantum - 1) / kRowQuantum);
  int rows_per_split = (m + row_splits - 1) / row_splits;
  rows_per_split = (rows_per_split + kRowQuantum - 1) / kRowQuantum * kRowQuantum;
  row_splits = (m + rows_per_split - 1) / rows_per_split;
  const int tiles = col_splits * row_splits;
  nt = std::min(nt, tiles);

  auto run_tile = [&](int t) {
    const int s = t / row_splits, r = t % row_splits;
    const int p0 = s * strip, p1 = std::min(panels, p0 + strip);
    const int m0 = r * rows_per_split, m1 = std::min(m, m0 + rows_per_split);
    fn(a, lda, w, bias, c, ldc, m0, m1, p0, p1);
  };
  if (nt <= 1) {
    fn(a, lda, w, bias, c, ldc, 0, m, 0, panels);
  } else {
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt)
    for (int t = 0; t < tiles; ++t) run_tile(t);
  }
}

void gemm_reference(const float* a, int m, int lda, const void* w, DType dtype, int n, int k, const float* bias,
                    float* c, int ldc) {
  check_dtype(dtype);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      float acc = 0.0f;
      for (int kk = 0; kk < k; ++kk) {
        acc = std::fma(a[static_cast<std::size_t>(i) * lda + kk],
                       widen(w, dtype, static_cast<std::size_t>(j) * k + kk), acc);
      }
      c[static_cast<std::size_t>(i) * ldc + j] = bias ? acc + bias[j] : acc;
    }
  }
}

namespace detail {

namespace {

template <typename T>
float widen_one(T v, DType dtype) {
  if constexpr (sizeof(T) == 4) {
    (void)dtype;
    return v;
  } else {
    return dtype == DType::BF16 ? bf16_to_f32(v) : f16_to_f32(v);
  }
}

// One row × one panel at a time: the same chains as the SIMD kernels, one lane per column.
template <typename T>
void tile_portable(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc, int m0,
                   int m1, int p0, int p1) {
  const int K = w.k;
  int pos[kNr];
  for (int j = 0; j < kNr; ++j) pos[j] = packed_pos(w.dtype, j);
  for (int p = p0; p < p1; ++p) {
    const T* panel = reinterpret_cast<const T*>(w.data.data()) + static_cast<std::size_t>(p) * K * kNr;
    const int ncols = std::min(kNr, w.n - p * kNr);
    for (int i = m0; i < m1; ++i) {
      const float* ar = a + static_cast<std::size_t>(i) * lda;
      float acc[kNr] = {};
      for (int kk = 0; kk < K; ++kk) {
        const T* wk = panel + static_cast<std::size_t>(kk) * kNr;
        const float av = ar[kk];
        for (int j = 0; j < ncols; ++j) acc[j] = std::fma(av, widen_one(wk[pos[j]], w.dtype), acc[j]);
      }
      float* cr = c + static_cast<std::size_t>(i) * ldc + p * kNr;
      for (int j = 0; j < ncols; ++j) cr[j] = bias ? acc[j] + bias[p * kNr + j] : acc[j];
    }
  }
}

}  // namespace

void gemm_tile_portable(const float* a, int lda, const PackedWeight& w, const float* bias, float* c, int ldc,
                        int m0, int m1, int p0, int p1) {
  if (w.dtype == DType::F32) {
    tile_portable<float>(a, lda, w, bias, c, ldc, m0, m1, p0, p1);
  } else {
    tile_portable<uint16_t>(a, lda, w, bias, c, ldc, m0, m1, p0, p1);
  }
}

}  // namespace detail

}  // namespace parity::kernels
