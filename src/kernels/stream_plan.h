#pragma once
// How the memory-bound kernels stream memory on this machine: how far ahead they ask for the bytes
// they will read, and how many bf16 state rows a decode dot streams side by side.
//
// A batch-1 decode streams every weight once (the GEMM's panels) and every SSM state once (the
// decode kernels); both run at the memory's pace, and what keeps that pace depends on the core's
// own prefetchers and load ports. Measured, one thread (docs/performance.md):
//  - AMD Zen 5: asking 2 KiB ahead in each weight-panel stream took one-row GEMMs 4-18 % faster
//    (session 17), and the state 8 KiB ahead into L1 (a bf16 state also 16 KiB ahead into the
//    outer caches) took exact decode's SSM part from ~1.25x its floor to ~1.0x (session 16); bf16
//    state dots four rows side by side were faster than one row at a time;
//  - AMD Zen 4: the same requests made both slower: the one-row GEMMs ran at 77-84 % of the read
//    bandwidth with them and at 91-100 % without, and a batch-1 decode step was 16-27 % slower
//    (session 25): its own prefetchers keep the streams going, the requests only cost slots. The
//    next head's state asked for during an exact-mode fold went into L2 there 1.5 % faster (a 32 KiB
//    L1 holds one head's fp32 state, which the fold itself is streaming through), and bf16 state
//    dots one row at a time were 10-14 % faster than four (four streams 512 bytes apart);
//  - Intel Xeon: session 11's Xeon was best with the state 768 B / 2 KiB ahead, but on the device
//    machines' Emerald Rapids host (session 25, BM_StreamPlanDecode) Zen 5's plan made a batch-1
//    step and the lm_head GEMM 13 % faster than those distances with unprefetched GEMM streams, so
//    Intel CPUs (and any CPU no plan was measured on) get Zen 5's.
// No plan moves an operation: every element sees the same sequence, so every plan gives the same
// bits (tests/kernels_stream_plan_test.cpp).
#include <span>

namespace parity::kernels {

struct StreamPlan {
  const char* name;  // the machine it was measured on
  int gemm_ahead;    // bytes ahead in each weight-panel stream of the few-rows GEMM; 0: none
  int state_near;    // decode: bytes ahead in the state stream, into L1; 0: none
  int state_far;     // decode, bf16 state: bytes ahead into the outer caches; 0: none
  int fold_next;     // exact decode: during a fold, the next head's state into L1 (1), L2 (2), not at all (0)
  int bf16_dot_rows; // decode state dots on a bf16 state: rows streamed side by side (1 or 4)
};

// Every measured plan, the detected machine's among them.
std::span<const StreamPlan> stream_plans();
// The plan for this CPU: Zen 4's on an AMD family 0x19 CPU, Zen 5's on every other.
const StreamPlan& detected_stream_plan();

// The plan the kernels use now (the detected one unless set). Setting it is for benchmarks that
// compare plans side by side and for tests; call it between passes, not during one.
StreamPlan active_stream_plan();
void set_stream_plan(const StreamPlan& plan);
void clear_stream_plan();

// The active plan's values, read by the kernels once per row or per call (inline: a state row is a
// few dozen instructions; static, because the ISA files call them: docs/numerics.md).
namespace stream_detail {
// Plain ints read and written with the atomic builtins: no std::atomic member (an inline function
// with external linkage) in the ISA files.
extern int g_gemm_ahead, g_state_near, g_state_far, g_fold_next, g_bf16_dot_rows;
}
static inline int gemm_prefetch_ahead() { return __atomic_load_n(&stream_detail::g_gemm_ahead, __ATOMIC_RELAXED); }
static inline int state_prefetch_near() { return __atomic_load_n(&stream_detail::g_state_near, __ATOMIC_RELAXED); }
static inline int state_prefetch_far() { return __atomic_load_n(&stream_detail::g_state_far, __ATOMIC_RELAXED); }
static inline int fold_prefetch_next() { return __atomic_load_n(&stream_detail::g_fold_next, __ATOMIC_RELAXED); }
static inline int bf16_dot_rows() { return __atomic_load_n(&stream_detail::g_bf16_dot_rows, __ATOMIC_RELAXED); }

}  // namespace parity::kernels
