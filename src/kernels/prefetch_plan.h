#pragma once
// How far ahead the memory-bound kernels ask for the bytes they will read, by machine.
//
// A batch-1 decode streams every weight once (the GEMM's panels) and every SSM state once (the
// decode kernels); both run at the memory's pace, and whether software prefetches help that pace
// depends on the core's own prefetchers. Measured, one thread (docs/performance.md):
//  - AMD Zen 5: asking 2 KiB ahead in each weight-panel stream took one-row GEMMs 4-18 % faster
//    (session 17), and the state 8 KiB ahead into L1 (a bf16 state also 16 KiB ahead into the
//    outer caches) took exact decode's SSM part from ~1.25x its floor to ~1.0x (session 16);
//  - AMD Zen 4: the same requests made both slower: the one-row GEMMs ran at 77-84 % of the
//    read bandwidth with them and at 91-100 % without, and a batch-1 decode step was 16-27 %
//    slower (session 25): its own prefetchers keep the streams going, the requests only cost slots;
//    the next head's state asked for during an exact-mode fold went into L2 there 1.5 % faster (a
//    32 KiB L1 holds one head's fp32 state, which the fold itself is streaming through);
//  - Intel Xeon (session 11): the state 768 B / 2 KiB ahead was best, 4 KiB and more lost; the
//    GEMM streams were not prefetched then.
// A prefetch moves no arithmetic, so every plan gives the same bits (tests/kernels_prefetch_plan_test.cpp).
#include <atomic>

namespace parity::kernels {

struct PrefetchPlan {
  const char* name;  // the machine it was measured on
  int gemm_ahead;    // bytes ahead in each weight-panel stream of the few-rows GEMM; 0: none
  int state_near;    // decode: bytes ahead in the state stream, into L1; 0: none
  int state_far;     // decode, bf16 state: bytes ahead into the outer caches; 0: none
  int fold_next;     // exact decode: during a fold, the next head's state into L1 (1), L2 (2), not at all (0)
};

// Every measured plan, the detected machine's among them.
const PrefetchPlan* prefetch_plans(int* count);
// The plan for this CPU: by vendor and family, Zen 5's for a CPU no plan was measured on.
const PrefetchPlan& detected_prefetch_plan();

// The plan the kernels use now (the detected one unless set). Setting it is for benchmarks that
// compare plans side by side and for tests; call it between passes, not during one.
PrefetchPlan active_prefetch_plan();
void set_prefetch_plan(const PrefetchPlan& plan);
void clear_prefetch_plan();

// The active plan's distances, read by the kernels once per row or per call (inline: a state row
// is a few dozen instructions).
namespace prefetch_detail {
extern std::atomic<int> g_gemm_ahead, g_state_near, g_state_far, g_fold_next;
}
inline int gemm_prefetch_ahead() { return prefetch_detail::g_gemm_ahead.load(std::memory_order_relaxed); }
inline int state_prefetch_near() { return prefetch_detail::g_state_near.load(std::memory_order_relaxed); }
inline int state_prefetch_far() { return prefetch_detail::g_state_far.load(std::memory_order_relaxed); }
inline int fold_prefetch_next() { return prefetch_detail::g_fold_next.load(std::memory_order_relaxed); }

}  // namespace parity::kernels
