// The four-column lane walk at 64 columns of one head a block (two warps): ways 764 (C and B by quarter)
// and 864 (as in the row). The kernel is ssd_pipe4_body.cuh.
#define P4_COLS 4
#define P4_WARPS 2
#define P4_WAY_Q 764
#define P4_WAY_N 864
#define P4_NS pipe4
#include "kernels_cuda/ssd_pipe4_body.cuh"
