#pragma once
// cell_band_cover.cu: the one-launch band and tables' partition of a pass (ssd_tc_cell_band.cu), worked out on the
// CPU from the planner's tasks (PassPlan::host_view) and the kernels' own cell_task, so that what the kernel's
// buffers and its row writes rest on is checked without a GPU.
#include <vector>

#include "kernels_cuda/ops.h"

namespace parity::test {

// What a pass's (cell task, group) blocks would do. writer_all_heads: every live head's cell writes its rows (the
// companion: a rule that cannot partition the rows), else the group's first head's only (the kernel's rule).
struct CellBandCover {
  std::vector<int> row_writes;   // [group][packed row]: how many blocks write that row's bf16 C and B of the group
  std::vector<int> ring_writes;  // [group][sequence]: how many blocks write the ring's 15 rows before the call
  int max_window = 0;            // call rows a block stages (the kernel holds 31)
  int max_span = 0;              // B rows a block stages, from its first source row (the kernel holds 46)
  int outside = 0;  // a live head's cell rows outside what its block stages, or B from before the window's first
                    // row − 15, where the kernel's index of B starts (the kernel needs 0)
};
CellBandCover cell_band_cover(const cuda::ScanGrid& g, const cuda::PassSeqs& p, int H, int groups,
                              bool writer_all_heads = false);

}  // namespace parity::test
