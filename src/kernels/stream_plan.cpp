#include "kernels/stream_plan.h"

#include <cpuid.h>

#include <atomic>
#include <cstring>

namespace parity::kernels {

namespace {

constexpr StreamPlan kPlans[] = {
    {"zen5", 2048, 8192, 16384, 1, 4},
    {"zen4", 0, 0, 0, 2, 1},
};
constexpr int kPlanCount = static_cast<int>(sizeof(kPlans) / sizeof(kPlans[0]));
constexpr int kZen5 = 0, kZen4 = 1;

int detect_plan() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return kZen5;
  char vendor[13] = {};
  std::memcpy(vendor, &b, 4);
  std::memcpy(vendor + 4, &d, 4);
  std::memcpy(vendor + 8, &c, 4);
  if (!__get_cpuid(1, &a, &b, &c, &d)) return kZen5;
  const unsigned base = (a >> 8) & 0xF, ext = (a >> 20) & 0xFF;
  const unsigned family = base == 0xF ? base + ext : base;
  if (std::strcmp(vendor, "AuthenticAMD") == 0 && family == 0x19) return kZen4;  // Zen 3 has no AVX-512
  return kZen5;  // Zen 5, Intel, anything else
}

const int g_detected = detect_plan();
// Which plan is active: an index into kPlans, or -1 for values set by hand.
std::atomic<int> g_active{g_detected};

}  // namespace

namespace stream_detail {
int g_gemm_ahead = kPlans[g_detected].gemm_ahead;
int g_state_near = kPlans[g_detected].state_near;
int g_state_far = kPlans[g_detected].state_far;
int g_fold_next = kPlans[g_detected].fold_next;
int g_bf16_dot_rows = kPlans[g_detected].bf16_dot_rows;
}  // namespace stream_detail

std::span<const StreamPlan> stream_plans() { return {kPlans, static_cast<std::size_t>(kPlanCount)}; }

const StreamPlan& detected_stream_plan() { return kPlans[g_detected]; }

StreamPlan active_stream_plan() {
  const int i = g_active.load(std::memory_order_relaxed);
  return {i >= 0 ? kPlans[i].name : "custom", gemm_prefetch_ahead(), state_prefetch_near(), state_prefetch_far(),
          fold_prefetch_next(), bf16_dot_rows()};
}

void set_stream_plan(const StreamPlan& plan) {
  int known = -1;
  for (int i = 0; i < kPlanCount; ++i)
    if (plan.gemm_ahead == kPlans[i].gemm_ahead && plan.state_near == kPlans[i].state_near &&
        plan.state_far == kPlans[i].state_far && plan.fold_next == kPlans[i].fold_next &&
        plan.bf16_dot_rows == kPlans[i].bf16_dot_rows)
      known = i;
  __atomic_store_n(&stream_detail::g_gemm_ahead, plan.gemm_ahead > 0 ? plan.gemm_ahead : 0, __ATOMIC_RELAXED);
  __atomic_store_n(&stream_detail::g_state_near, plan.state_near > 0 ? plan.state_near : 0, __ATOMIC_RELAXED);
  __atomic_store_n(&stream_detail::g_state_far, plan.state_far > 0 ? plan.state_far : 0, __ATOMIC_RELAXED);
  const int fold_next = plan.fold_next == 1 || plan.fold_next == 2 ? plan.fold_next : 0;
  __atomic_store_n(&stream_detail::g_fold_next, fold_next, __ATOMIC_RELAXED);
  __atomic_store_n(&stream_detail::g_bf16_dot_rows, plan.bf16_dot_rows == 1 ? 1 : 4, __ATOMIC_RELAXED);
  g_active.store(known, std::memory_order_relaxed);
}

void clear_stream_plan() { set_stream_plan(kPlans[g_detected]); }

}  // namespace parity::kernels
