// The window, the staged span and the bf16 rows' writers of ssd_tc_cell_band.cu's blocks, by its rules (see its
// header comment), over a plan's host view. Host code only: cell_task and call_cell are the kernels' own.
#include "tests/cuda/cell_band_cover.h"

#include <algorithm>
#include <cstdint>

#include "kernels_cuda/ssd_device.cuh"
#include "kernels_cuda/ssd_tc_kernels.h"

namespace parity::test {

CellBandCover cell_band_cover(const cuda::ScanGrid& g, const cuda::PassSeqs& p, int H, int groups,
                              bool writer_all_heads) {
  CellBandCover cv;
  cv.row_writes.assign(static_cast<std::size_t>(p.num_rows) * groups, 0);
  cv.ring_writes.assign(static_cast<std::size_t>(p.num_seqs) * groups, 0);
  const int hpg = H / groups;
  for (int task = 0; task < p.num_cell_tasks; ++task)
    for (int grp = 0; grp < groups; ++grp) {
      const int seq = p.cell_task[2 * task];
      const int64_t start = p.start[seq];
      int c_lo = 1 << 30, c_hi = -(1 << 30), s_lo = 1 << 30;
      for (int hh = 0; hh < hpg; ++hh) {
        const cuda::ssd::CellTask ct = cuda::ssd::cell_task(g, p, task, grp * hpg + hh, H);
        if (!ct.live) continue;
        c_lo = std::min(c_lo, static_cast<int>(ct.first - start));
        c_hi = std::max(c_hi, static_cast<int>(ct.c.start - start) + ct.L);
        s_lo = std::min(s_lo, static_cast<int>(ct.c.start - start));
      }
      if (c_hi <= c_lo) continue;
      const cuda::ssd::CellTask c0 = cuda::ssd::cell_task(g, p, task, grp * hpg, H);
      const bool pre = c0.live && c0.first == start;
      const int b_from = pre ? -cuda::kSsdTcRingRows : s_lo;
      if (b_from < c_lo - cuda::kSsdTcRingRows) ++cv.outside;  // B indexed from the window's first row − 15
      cv.max_window = std::max(cv.max_window, c_hi - c_lo);
      cv.max_span = std::max(cv.max_span, c_hi - b_from);
      for (int hh = 0; hh < hpg; ++hh) {
        const cuda::ssd::CellTask ct = cuda::ssd::cell_task(g, p, task, grp * hpg + hh, H);
        if (!ct.live) continue;
        const int first = static_cast<int>(ct.first - start), cs = static_cast<int>(ct.c.start - start);
        if (first < c_lo || cs + ct.L > c_hi || cs < b_from) ++cv.outside;
        if (hh != 0 && !writer_all_heads) continue;
        for (int r = first; r < cs + ct.L; ++r)
          ++cv.row_writes[static_cast<std::size_t>(grp) * p.num_rows + p.row0[seq] + r];
        if (ct.first == start) ++cv.ring_writes[static_cast<std::size_t>(grp) * p.num_seqs + seq];
      }
    }
  return cv;
}

}  // namespace parity::test
