// The lane walk of ssd_pipe4_body.cuh at two columns a lane and one warp a block (16 columns of p): ways
// 716 (C and B by quarter) and 816 (as in the row). For one sequence: 128 blocks at 32 heads × 64, as the
// span walk.
#define P4_COLS 2
#define P4_WARPS 1
#define P4_WAY_Q 716
#define P4_WAY_N 816
#define P4_NS pipe2
#include "kernels_cuda/ssd_pipe4_body.cuh"
