#pragma once
// How the lane walks (ssd_lanes.cu, ssd_pipe.cu) step from one cell of a call to the next: a call's
// first cell from its cell task, every later one from the cell before it (call_cell's k > 0 without
// its divisions). Index arithmetic only: no value depends on it.
#include <cstdint>

#include "kernels_cuda/ssd_device.cuh"

namespace parity::cuda::ssd {
namespace {

// One cell of the call as the walk takes it: source rows cs .. cs+L-1 (ring rows first where the
// call starts inside it), output rows j0 .. L-1, folded or not (exact: only a cell the call completes).
struct CellIn {
  int64_t cs, ce;
  int L, j0;
  bool live, fold;
};
__device__ inline CellIn first_cell(const CellTask& t) { return {t.c.start, t.c.end, t.L, t.j0, t.live, t.fold}; }
// The cell after c: it starts at c's end.
__device__ inline CellIn next_cell(const CellIn& c, int64_t end, int G, bool exact) {
  CellIn n;
  n.cs = c.ce;
  n.ce = c.ce + G;
  n.live = n.cs < end;
  n.L = n.live ? static_cast<int>((n.ce < end ? n.ce : end) - n.cs) : 0;
  n.j0 = 0;
  n.fold = n.live && (exact ? n.ce <= end : true);
  return n;
}

// The cell after x (the k-th of the call's K cells) and whether the walk reaches it: x folds (a cell the call
// leaves open is the last it touches), it is one of the K, and the call reaches it.
__device__ inline CellIn cell_after(const CellIn& x, int k, int K, int64_t end, const ScanGrid& g, bool& has) {
  const CellIn n = next_cell(x, end, g.cell, g.exact);
  has = x.fold && k + 1 < K && n.live;
  return n;
}

__device__ __forceinline__ void wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

// Benchmarks only (kOn, a probe buffer set): thread 0 of the first block sums its clock cycles per step of
// the walk (mark(i) closes step i) and counts the cells (cell()); write() stores the kSteps sums, then the
// count. Off, it holds nothing and does nothing.
template <bool kOn, int kSteps>
struct CellProbe {
  __device__ CellProbe(const long long*, int) {}
  __device__ void mark(int) {}
  __device__ void cell() {}
  __device__ void write(long long*) const {}
};
template <int kSteps>
struct CellProbe<true, kSteps> {
  bool timing;
  long long steps[kSteps] = {}, tick = 0, cells = 0;
  __device__ CellProbe(const long long* probe, int tid) {
    timing = probe != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && blockIdx.z == 0 && tid == 0;
    if (timing) tick = clock64();
  }
  __device__ void mark(int i) {
    if (!timing) return;
    const long long now = clock64();
    steps[i] += now - tick;
    tick = now;
  }
  __device__ void cell() { ++cells; }
  __device__ void write(long long* probe) const {
    if (!timing) return;
#pragma unroll
    for (int i = 0; i < kSteps; ++i) probe[i] = steps[i];
    probe[kSteps] = cells;
  }
};

}  // namespace
}  // namespace parity::cuda::ssd
