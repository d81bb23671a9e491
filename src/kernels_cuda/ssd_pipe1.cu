// The lane walk of ssd_pipe4_body.cuh at one column a lane and two warps a block (16 columns of p): ways
// 616 (C and B by quarter) and 916 (as in the row). For one sequence: 128 blocks at 32 heads × 64, twice the
// lanes of 716 / 816, half the work each.
#define P4_COLS 1
#define P4_WARPS 2
#define P4_WAY_Q 616
#define P4_WAY_N 916
#define P4_NS pipe1
#include "kernels_cuda/ssd_pipe4_body.cuh"
