#pragma once
// Exact-mode SSD on the exact grid (exact_grid.h; DESIGN.md rules 6–7). Output row t of head h is
// ssd.h's row routine over (the state at the start of t's cell, the cell's rows <= t), the same
// arithmetic whether the call holds one row or many; the state at a cell's end is ssd.h's fold
// over the cell's rows. The per-element sequences are those of ssd_internal.h, so a cell of the
// RFC layout (cell = chunk_size, no stagger) gives the bits of ssd_scan over that chunk.
//
// The boundary state is kept per head at that head's last boundary, in fp32 or bf16. A bf16 state
// is rounded (nearest even) at every boundary in every path, multi-row calls included, and is
// widened exactly where it is read, so its bits do not depend on the schedule either.
//
// The replay ring: the x, dt and B of the positions since each head's last boundary, at most
// `cell` of them, kept per sequence so that decode and a call starting inside a cell can re-feed
// them:
//   x  [nheads][cell][headdim]   head h's row of position p at slot grid.ring_slot(h, p)
//   dt [nheads][cell]            same slots (dt after softplus and the time_step_limit clamp)
//   B  [2·cell][ngroups·dstate]  position p at slots p % cell and p % cell + cell, so that any cell
//                                of any head is one run of consecutive rows
// C is not kept: re-fed rows emit nothing.
#include <cstdint>

#include "kernels/exact_grid.h"
#include "kernels/ssd.h"

namespace parity::kernels {

// The boundary states of every head, [nheads][headdim][dstate]; exactly one pointer is set.
struct GridState {
  float* f32 = nullptr;
  uint16_t* bf16 = nullptr;
};

struct ReplayRing {
  float* x = nullptr;
  float* dt = nullptr;
  float* B = nullptr;
};

// Floats of each ring part for one sequence and layer.
struct RingSizes {
  int64_t x, dt, B;
};
RingSizes ring_sizes(const SsdShape& shape, const ExactGrid& grid);

// Writes position pos's x [nheads·headdim], dt [nheads] and B [ngroups·dstate] into the ring;
// ring_get reads them back (row-major, for a call that re-feeds them).
void ring_put(const SsdShape& shape, const ExactGrid& grid, const ReplayRing& ring, int64_t pos, const float* x,
              const float* dt, const float* B);
void ring_get(const SsdShape& shape, const ExactGrid& grid, const ReplayRing& ring, int64_t pos, float* x, float* dt,
              float* B);

// Rows re-fed before a call whose first new row is at `start`: the most any head is into its cell.
int grid_refeed_rows(const ExactGrid& grid, int nheads, int64_t start);

// A multi-row call: rows 0..n-1 of x, dt, B sit at absolute positions pos0 .. pos0+n-1; rows from
// first_out on emit y (C and y hold n - first_out rows). For every head, the state holds the
// state at cell_start(h, pos0 + first_out), which must be >= pos0 (the caller re-feeds the rows
// between). Afterwards each head's state is the state at its last boundary <= pos0 + n. Parallel
// over heads. Shapes of x, dt, B, C, y and x_stride as in ssd_scan.
void ssd_scan_grid(const SsdShape& shape, const ExactGrid& grid, const float* x, const float* dt, const float* A,
                   const float* B, const float* C, const float* D, int64_t pos0, int n, int first_out,
                   GridState state, float* y, int64_t x_stride = 0);

// Plain scalar twin of ssd_scan_grid; tests compare the two bitwise.
void ssd_scan_grid_reference(const SsdShape& shape, const ExactGrid& grid, const float* x, const float* dt,
                             const float* A, const float* B, const float* C, const float* D, int64_t pos0, int n,
                             int first_out, GridState state, float* y, int64_t x_stride = 0);

// Exact-mode decode of one new token per sequence, every sequence of a pass in one parallel
// region over (sequence, head). The token at `pos` must already be in the ring. Per head: y from
// the boundary state and the ring rows of the head's cell up to pos; when pos is the cell's last
// row, the cell is folded into the boundary state (rounded to bf16 for a bf16 state) after y has
// read it. Bit for bit, y equals ssd_scan_grid's row and the state its state.
struct GridDecodeRow {
  int64_t pos = 0;
  const float* x_ring = nullptr;
  const float* dt_ring = nullptr;
  const float* b_ring = nullptr;
  const float* C = nullptr;  // [ngroups·dstate] of the new token
  GridState state;
  float* y = nullptr;        // [nheads·headdim]
};
void ssd_grid_decode(const SsdShape& shape, const ExactGrid& grid, const float* A, const float* D,
                     const GridDecodeRow* rows, int count);

}  // namespace parity::kernels
