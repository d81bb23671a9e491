#pragma once
// Exact mode's own SSD grid (DESIGN.md rule 6): cells of `cell` rows anchored at absolute position
// 0, independent of the model's chunk_size. With the stagger on, head h's grid is shifted by a
// fixed offset o_h = h·cell / nheads: its boundaries are 0 and every p > 0 with p ≡ o_h (mod cell),
// so its first cell is [0, o_h) (or [0, cell) when o_h is 0). A head's cell ends on about 1/cell of
// the steps, and the steps on which it does are spread over the heads: a decode step folds
// ~nheads/cell heads instead of every cell-th step folding all of them.
//
// The grid, the stagger and the state dtype are exact mode's identity (they change the bits);
// `cell` = chunk_size with the stagger off is the RFC's layout, whose rows equal a single-shot
// standard chunked scan at chunk_size.
#include <cstdint>

namespace parity::kernels {

// The exact-mode default on the CPU, chosen by measurement (docs/performance.md, "Choosing the
// cell"): decode steps with cells of 4, 8 and 16 rows cost the same within noise, 8 slightly least;
// the ring, and so the cache, grows with the cell (8: 1.14× plain's bytes at bf16, 16: 1.28×, 32:
// 1.56×); prefill is below plain's cost at 8 and 16.
inline constexpr int kDefaultExactCell = 8;

// How the scan forms a cell's products (C·Sᵀ, the cell's intra sum, the fold's delta); every sum of them
// accumulates in fp32 (DESIGN.md rule 5). float32: fp32 factors and FMA chains, every backend's default and the
// CPU's only way. bfloat16 / split: the CUDA backend's tensor-core walk (kernels_cuda/ssd_tc.h), its factors
// rounded to bf16 (as vLLM's chunk scan rounds them) or split into a bf16 hi + lo. Part of exact mode's
// identity: each gives other bits.
enum class ScanProducts { float32 = 0, bfloat16 = 1, split = 2 };

struct ExactGrid {
  int cell = kDefaultExactCell;  // G, a power of two
  bool stagger = true;
  int nheads = 1;
  // A tensor-parallel rank holds heads [first_head, first_head + nheads) of a mixer of model_heads
  // heads (0: the whole mixer). Its heads keep the offsets they have in the whole model, so every
  // TP degree computes on the same grid.
  int first_head = 0;
  int model_heads = 0;
  ScanProducts products = ScanProducts::float32;

  int offset(int head) const {
    const int64_t all = model_heads > 0 ? model_heads : nheads;
    return stagger ? static_cast<int>(int64_t(first_head + head) * cell / all) % cell : 0;
  }
  // Start of the cell of `head` holding absolute position pos.
  int64_t cell_start(int head, int64_t pos) const {
    const int o = offset(head);
    return pos < o ? 0 : pos - (pos - o) % cell;
  }
  // The boundary after the cell that starts at `start`.
  int64_t cell_end(int head, int64_t start) const {
    const int o = offset(head);
    return (start == 0 && o > 0) ? o : start + cell;
  }
  // Slot of position pos in head h's ring of `cell` rows: a cell of the head occupies consecutive
  // slots (a cell after the first starts at slot 0), so the kernels read it as one stream.
  int ring_slot(int head, int64_t pos) const {
    const int64_t r = (pos - offset(head)) % cell;
    return static_cast<int>(r < 0 ? r + cell : r);
  }
  bool operator==(const ExactGrid&) const = default;
};

}  // namespace parity::kernels
