#pragma once
// The swap-AB mma.sync kernel's grouped consumer (gemm_swap_ab_mma.cuh's GROUP; session 13, issue 11).
//
// Why: at one row out_proj's consumer loop took ~296 cycles a 64-deep box (BM_CudaGemmSwapAbProbe,
// session 12) for four dependent k16 steps of ~24 cycles each (BM_CudaMmaChain): each box paid a
// barrier wait whose answer the next step needed, an arrival that held the warp until the box's
// fragment loads had returned, and a register copy of the next box's fragments, all between two
// dependent steps. Here a warp meets the ring's barriers once per group of G boxes and never between
// two steps in a way the next step waits for:
//   - group g's fragments (all G boxes) are in registers before its first step; group g + 1's are
//     read while group g's 4G steps run (two register sets, swapped by unrolling: no copy);
//   - group g + 1's barriers are tested (mbarrier.test_wait, no wait) after group g's first step and
//     the answer is used two steps later; only a group not yet landed waits (try_wait);
//   - group g + 1's stages are released two steps after the last of its fragment loads was issued.
// The steps, their operands and their order per accumulator are exactly the box-by-box consumer's
// (K ascending in 16-deep steps, a 32-deep last box's two real steps only): only where the barrier
// instructions sit between them changes, so the bits are the same (CudaGemmSwapAbGroup tests).
#include <cstdint>

#include "kernels_cuda/ptx.cuh"

namespace parity::cuda::swap_ab {

// G boxes a group; S the ring's stages. read(f, b): box b's fragments into f (its stage has landed);
// wait_full(b): blocks until box b's stage has landed (the probe times it); step(f, kk): the k16 step kk
// of the box whose fragments f holds. PROBE: t_first is set once group 0 is in registers, t_wait
// counts only the waits after it.
template <int G, int S, bool PROBE, typename Frag, typename Read, typename WaitFull, typename Step>
__device__ __forceinline__ void group_consumer(Read& read, WaitFull& wait_full, Step& step, std::uint64_t* full,
                                               std::uint64_t* empty, int lane, int kboxes, int whole,
                                               long long& t_first, long long& t_wait) {
  static_assert(G >= 2, "the test and the loads of the next group sit in its first box and the release in its last");
  // Group g's stages all landed? (acquire when yes, as the wait.)
  auto landed = [&](int g) {
    bool all = true;
#pragma unroll
    for (int i = 0; i < G; ++i) {
      const int b = g * G + i;
      if (b < kboxes) all = ptx::mbar_test(&full[b % S], (b / S) & 1) && all;
    }
    return all;
  };
  auto wait_group = [&](int g) {
#pragma unroll
    for (int i = 0; i < G; ++i)
      if (g * G + i < kboxes) wait_full(g * G + i);
  };
  // The fragments of group g's stages are read (the loads were issued at least two steps ago): they
  // may be refilled (the arrival orders the reads before it).
  auto release_group = [&](int g) {
    __syncwarp();
#pragma unroll
    for (int i = 0; i < G; ++i) {
      const int b = g * G + i;
      if (b < kboxes) ptx::mbar_arrive_lane0(&empty[b % S], lane);
    }
  };
  // Group g from cur (its boxes in registers), group g + 1 into nxt.
  auto group = [&](Frag (&cur)[G], Frag (&nxt)[G], int g) {
    const int g1 = g + 1;
    const bool more = g1 * G < kboxes;  // then every box of g is a whole 64-deep box
    bool ready = true;
#pragma unroll
    for (int i = 0; i < G; ++i) {
      const int b = g * G + i;
      if (b >= kboxes) break;
      step(cur[i], 0);
      if (i == 0 && more) ready = landed(g1);
      else if (i > 0 && g1 * G + i < kboxes) read(nxt[i], g1 * G + i);
      step(cur[i], 1);
      if (b < whole) {
        step(cur[i], 2);
        if (i == 0 && more) {
          if (!ready) wait_group(g1);
          read(nxt[0], g1 * G);
        }
        if (i == G - 1 && more) release_group(g1);
        step(cur[i], 3);
      }
    }
  };
  Frag fa[G], fb[G];
  wait_group(0);
#pragma unroll
  for (int i = 0; i < G; ++i)
    if (i < kboxes) read(fa[i], i);
  release_group(0);
  if constexpr (PROBE) {
    t_first = clock64();
    t_wait = 0;
  }
  for (int g = 0; g * G < kboxes; g += 2) {
    group(fa, fb, g);
    if ((g + 1) * G < kboxes) group(fb, fa, g + 1);
  }
}

}  // namespace parity::cuda::swap_ab
