// The four-column lane walk of ssd_pipe4_body.cuh at one warp a block (32 columns of p): way 832, C and
// B as in the row. Twice 864's blocks for a batch too small to fill the GPU with 864's.
#define P4_COLS 4
#define P4_WARPS 1
#define P4_WAY_Q 0
#define P4_WAY_N 832
#define P4_NS pipe4w
#include "kernels_cuda/ssd_pipe4_body.cuh"
