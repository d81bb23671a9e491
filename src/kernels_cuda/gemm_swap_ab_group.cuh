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
//
// BAR = G ("-s" variants): one barrier pair for a group's G stages instead of one a stage: the producer
// expects all G boxes' bytes on one full barrier and waits for one release, the consumer tests, waits
// for and releases once a group. Fewer barrier operations for the same boxes in the same stages.
//
// Measured (H200, BM_CudaGemmSwapAbProbe, out_proj at one row, cycles a box, L2 flushed): box by box 294,
// grouped with a barrier pair a box 294-298 (G = 4 / 2), with a barrier pair a group 288 (G = 2) and
// 210 (G = 4; 203 with L2 warm). Where the barrier instructions sit did not matter; how many a box
// did: each test and arrival costs the warp tens of cycles wherever it is issued. G = 4 with BAR = 4
// (mma-c32-2blk-g4s) is out_proj's default (gemm_swap_ab.cu). Session 14's steady state (below) took the
// loop less its waits from 202 to 117 cycles a box (out_proj) and 208 to 129 (in_proj); both now wait on
// their weights instead (docs/performance.md, "Session 14 … steady state").
#include <cstdint>

#include "kernels_cuda/gemm_swap_ab_kernel.cuh"
#include "kernels_cuda/ptx.cuh"

namespace parity::cuda::swap_ab {

// The ring's producer (one thread) when BAR boxes share a barrier pair: unit u (boxes BAR u ..) waits
// for unit u - S/BAR's release, expects its boxes' bytes on full[u % (S/BAR)] and requests them, W's box
// and A's box of box b into stage b % S (S a multiple of BAR, so a unit's stages are contiguous). The
// early flags as produce() (gemm_swap_ab_kernel.cuh) takes them: W's boxes of the first ring before the
// wait (the units' barriers then complete only with A's boxes, requested after it), the rest of the
// block's W boxes to L2, the release after the wait.
template <int S, int BAR, int kStageBytes, int kWBytes>
__device__ __forceinline__ void produce_units(unsigned ring, std::uint64_t* full, std::uint64_t* empty,
                                              const CUtensorMap* wmap, const CUtensorMap* xmap, int kboxes, int n0,
                                              int m0, unsigned early, const NextL2& next) {
  static_assert(S % BAR == 0, "a unit's stages are contiguous");
  constexpr int SU = S / BAR;
  ptx::prefetch_tensor_map(wmap);
  ptx::prefetch_tensor_map(xmap);
  const int units = (kboxes + BAR - 1) / BAR;
  auto boxes_of = [&](int u) { return kboxes - u * BAR < BAR ? kboxes - u * BAR : BAR; };
  int first = 0;  // units whose W was requested before the wait
  if (early != 0) {
    if (early & kEarlyWeights) {
      first = units < SU ? units : SU;
      for (int u = 0; u < first; ++u) {
        ptx::mbar_arrive_expect_tx(&full[u], static_cast<unsigned>(boxes_of(u) * kStageBytes));
        for (int i = 0; i < boxes_of(u); ++i) {
          const int b = u * BAR + i;
          ptx::tma_load_3d(ring + b * kStageBytes, wmap, 64 * b, n0, 0, &full[u]);
        }
      }
    }
    if (early & kEarlyL2Rest)
      for (int b = first * BAR; b < kboxes; ++b) ptx::tma_prefetch_l2_3d(wmap, 64 * b, n0, 0);
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
    if (early & kEarlyRelease) asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
    for (int u = 0; u < first; ++u)
      for (int i = 0; i < boxes_of(u); ++i) {
        const int b = u * BAR + i;
        ptx::tma_load_3d(ring + b * kStageBytes + kWBytes, xmap, 64 * b, m0, 0, &full[u]);
      }
  }
  for (int u = first; u < units; ++u) {
    const int su = u % SU;
    if (u >= SU) ptx::mbar_wait(&empty[su], ((u / SU) - 1) & 1);
    ptx::mbar_arrive_expect_tx(&full[su], static_cast<unsigned>(boxes_of(u) * kStageBytes));
    for (int i = 0; i < boxes_of(u); ++i) {
      const int b = u * BAR + i;
      const unsigned st = ring + (b % S) * kStageBytes;
      ptx::tma_load_3d(st, wmap, 64 * b, n0, 0, &full[su]);
      ptx::tma_load_3d(st + kWBytes, xmap, 64 * b, m0, 0, &full[su]);
    }
  }
  prefetch_share_l2(next);
}

// G boxes a group; BAR boxes a barrier pair (1, or G: produce_units); S the ring's stages (a multiple
// of BAR). read(f, b, s): box b's fragments into f from stage s = b % S (landed); step(f, kk): the k16
// step kk of the box whose fragments f holds. PROBE: t_first is set once group 0 is in registers, t_wait
// counts the cycles spent in blocking waits after it.
//
// The steady state (session 14): while the group after next is also whole, a group runs without a
// per-box condition (every box 64-deep, every next box there) and finds its stages and barriers from a
// running cursor instead of b % S and b / S. ncu's per-instruction samples of session 13's loop (out_proj
// at one row) showed why it matters: mma.sync's result is tracked by fixed stall counts, and before every
// branch the compiler drains the pending step (the step's ~24 cycles, NOPs where nothing else is
// ready), so each of a box's half-dozen branches and its divisions by S sat between two dependent steps
// unhidden. Without branches the address arithmetic, the fragment loads and the barrier test issue in
// the steps' shadows. The same steps in the same order.
template <int G, int BAR, int S, bool PROBE, typename Frag, typename Read, typename Step>
__device__ __forceinline__ void group_consumer(Read& read, Step& step, std::uint64_t* full, std::uint64_t* empty,
                                               int lane, int kboxes, int whole, long long& t_first,
                                               long long& t_wait) {
  static_assert(G >= 2, "the test and the loads of the next group sit in its first box and the release in its last");
  static_assert(BAR == 1 || BAR == G, "a barrier pair covers one box or one group");
  static_assert(G <= S, "a group's stages wrap the ring at most once");
  constexpr int SU = S / BAR, UPG = G / BAR;  // barrier pairs; barrier units a group
  // Unit u (boxes BAR u .. BAR u + BAR - 1) exists while its first box does.
  auto unit_exists = [&](int u) { return u * BAR < kboxes; };
  // Group g's units all landed? (acquire when yes, as the wait.)
  auto landed = [&](int g) {
    bool all = true;
#pragma unroll
    for (int i = 0; i < UPG; ++i) {
      const int u = g * UPG + i;
      if (unit_exists(u)) all = ptx::mbar_test(&full[u % SU], (u / SU) & 1) && all;
    }
    return all;
  };
  auto wait_group = [&](int g) {
#pragma unroll
    for (int i = 0; i < UPG; ++i) {
      const int u = g * UPG + i;
      if (unit_exists(u)) ptx::mbar_wait_timed<PROBE>(&full[u % SU], (u / SU) & 1, t_wait);
    }
  };
  // The fragments of group g's stages are read (the loads were issued at least two steps ago): they
  // may be refilled (the arrival orders the reads before it).
  auto release_group = [&](int g) {
    __syncwarp();
#pragma unroll
    for (int i = 0; i < UPG; ++i) {
      const int u = g * UPG + i;
      if (unit_exists(u)) ptx::mbar_arrive_lane0(&empty[u % SU], lane);
    }
  };
  // Group g from cur (its boxes in registers), group g + 1 into nxt: any group, the tail included.
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
      else if (i > 0 && g1 * G + i < kboxes) read(nxt[i], g1 * G + i, (g1 * G + i) % S);
      step(cur[i], 1);
      if (b < whole) {
        step(cur[i], 2);
        if (i == 0 && more) {
          if (!ready) wait_group(g1);
          read(nxt[0], g1 * G, (g1 * G) % S);
        }
        if (i == G - 1 && more) release_group(g1);
        step(cur[i], 3);
      }
    }
  };
  // The steady state's cursor on group g + 1 (the group being read): its first box's stage s0 and that
  // stage's lap parity p0. Box i of the group sits in stage s0 + i (less S past the ring's end, the lap
  // flipped); with BAR = G its barrier pair is s0 / G (G divides S and s0), with BAR = 1 the box's stage.
  int s0 = G % S;
  unsigned p0 = (G / S) & 1u;
  auto stage_of = [&](int i) { return s0 + i < S ? s0 + i : s0 + i - S; };
  auto lap_of = [&](int i) { return s0 + i < S ? p0 : p0 ^ 1u; };
  auto steady_landed = [&]() {
    if constexpr (BAR == G) {
      return ptx::mbar_test(&full[s0 / G], p0);
    } else {
      bool all = true;
#pragma unroll
      for (int i = 0; i < G; ++i) all = ptx::mbar_test(&full[stage_of(i)], lap_of(i)) && all;
      return all;
    }
  };
  auto steady_wait = [&]() {
    if constexpr (BAR == G) {
      ptx::mbar_wait_timed<PROBE>(&full[s0 / G], p0, t_wait);
    } else {
#pragma unroll
      for (int i = 0; i < G; ++i) ptx::mbar_wait_timed<PROBE>(&full[stage_of(i)], lap_of(i), t_wait);
    }
  };
  auto steady_release = [&]() {
    __syncwarp();
    if constexpr (BAR == G) {
      ptx::mbar_arrive_lane0(&empty[s0 / G], lane);
    } else {
#pragma unroll
      for (int i = 0; i < G; ++i) ptx::mbar_arrive_lane0(&empty[stage_of(i)], lane);
    }
  };
  // Group g (whole, and group g + 1 whole and there): group()'s order with every condition true.
  auto steady = [&](Frag (&cur)[G], Frag (&nxt)[G], int g) {
    const int b1 = (g + 1) * G;
    bool ready = true;
#pragma unroll
    for (int i = 0; i < G; ++i) {
      step(cur[i], 0);
      if (i == 0) ready = steady_landed();
      else read(nxt[i], b1 + i, stage_of(i));
      step(cur[i], 1);
      step(cur[i], 2);
      if (i == 0) {
        if (!ready) steady_wait();
        read(nxt[0], b1, s0);
      }
      if (i == G - 1) steady_release();
      step(cur[i], 3);
    }
    s0 += G;
    if (s0 >= S) {
      s0 -= S;
      p0 ^= 1u;
    }
  };
  Frag fa[G], fb[G];
  wait_group(0);
#pragma unroll
  for (int i = 0; i < G; ++i)
    if (i < kboxes) read(fa[i], i, i % S);
  release_group(0);
  if constexpr (PROBE) {
    t_first = clock64();
    t_wait = 0;
  }
  int g = 0;
  // Pairs of steady groups while both are whole and each one's next group is whole too.
  for (; (g + 3) * G <= whole; g += 2) {
    steady(fa, fb, g);
    steady(fb, fa, g + 1);
  }
  for (; g * G < kboxes; g += 2) {
    group(fa, fb, g);
    if ((g + 1) * G < kboxes) group(fb, fa, g + 1);
  }
}

}  // namespace parity::cuda::swap_ab
