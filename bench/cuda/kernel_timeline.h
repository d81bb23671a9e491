#pragma once
// Each kernel's start and end on the GPU while a decode step runs from its graph, as CUPTI's activity
// records give them (issue 11's batch-1 target). The skip method (BM_CudaDecodeParts) takes a launch out
// and times what is left, which also moves every launch around it; this reads the untouched step.
// Nsight Systems cannot make a report on the device machines (.library/device/KINDS.md), CUPTI's
// concurrent-kernel records need no report and do not serialise kernels.
//
// Per kernel i of a step, in start order: its life (end − start), its lead (how long before the kernel
// ahead of it ended it started: > 0 for a programmatic launch that began early) and its share of the
// step's path, end_i − end_(i−1): a kernel waits for the one before it to complete, so the step's length
// is the sum of these shares. Kernels are keyed by name and by their turn among that name's launches in
// a layer (in_proj and out_proj are one kernel with two turns: #0, #1), a launch outside the turns by
// its count (@n).
#include <cstdint>
#include <string>
#include <vector>

namespace parity::bench {

struct KernelTimelineRow {
  std::string key;        // demangled name (cut), then '#' and the turn in a layer or '@' and the count
  int first_index = 0;    // where the key first runs in a step
  int per_step = 0;       // launches a step
  double path_us = 0;     // its share of a step's path, summed over the step's launches
  double life_us = 0;     // mean life of one launch
  double lead_us = 0;     // mean lead of one launch
};

struct KernelTimeline {
  bool available = false;  // built with CUPTI and the records came
  std::string why;         // when not
  int steps = 0;
  int kernels_per_step = 0;
  double step_us = 0;      // mean first start to last end of a step
  std::vector<KernelTimelineRow> rows;  // in first_index order
};

// Starts recording kernel activity (once per process; false with why when CUPTI is not there).
bool kernel_timeline_start(std::string* why);
// Stops, flushes and summarises `steps` steps recorded since the start (each the same kernels, in the
// same order); layers: the layer count, for the turns.
KernelTimeline kernel_timeline_finish(int steps, int layers);
// The summary as CSV (key, first_index, per_step, path_us, life_us, lead_us).
std::string kernel_timeline_csv(const KernelTimeline& t);

}  // namespace parity::bench
