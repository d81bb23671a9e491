#include "kernels/isa.h"

#include <cpuid.h>
#include <omp.h>

#include <atomic>
#include <string>

#include "common/error.h"

namespace parity::kernels {

namespace {

// -1 means "no override"; otherwise the Isa value. Atomics so that a test flipping the override
// never races with a kernel reading it on another thread.
std::atomic<int> g_override{-1};
std::atomic<int> g_threads{0};  // 0 means "not set yet": use OpenMP's default

// CPUID leaf 1, ECX bit 29. Asked directly because clang's __builtin_cpu_supports has no "f16c".
bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

Isa detect() {
  __builtin_cpu_init();
  // F16C is needed for the fp16 weight path of both SIMD kernels; every AVX2 CPU has it, but
  // checking costs nothing and keeps a strange hypervisor mask from crashing us.
  const bool fma = __builtin_cpu_supports("fma") && has_f16c();
  if (fma && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
    return Isa::Avx512;
  }
  if (fma && __builtin_cpu_supports("avx2")) return Isa::Avx2;
  return Isa::Portable;
}

bool supported(Isa want, Isa have) { return static_cast<int>(want) <= static_cast<int>(have); }

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Portable: return "portable";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  int o = g_override.load(std::memory_order_relaxed);
  return o < 0 ? detected_isa() : static_cast<Isa>(o);
}

void set_isa_override(Isa isa) {
  if (!supported(isa, detected_isa())) {
    throw Error(std::string("instruction set ") + isa_name(isa) + " is not supported by this CPU (best: " +
                isa_name(detected_isa()) + ")");
  }
  g_override.store(static_cast<int>(isa), std::memory_order_relaxed);
}

void clear_isa_override() { g_override.store(-1, std::memory_order_relaxed); }

namespace {
std::atomic<bool> g_bf16_enabled{true};
}

bool avx512_bf16_detected() {
  static const bool has = [] {
    __builtin_cpu_init();
    return detected_isa() == Isa::Avx512 && __builtin_cpu_supports("avx512bf16");
  }();
  return has;
}

bool avx512_bf16_active() { return g_bf16_enabled.load(std::memory_order_relaxed) && avx512_bf16_detected(); }

void set_avx512_bf16_enabled(bool on) { g_bf16_enabled.store(on, std::memory_order_relaxed); }

void set_num_threads(int n) {
  if (n < 1) throw Error("thread count must be at least 1, got " + std::to_string(n));
  g_threads.store(n, std::memory_order_relaxed);
}

namespace {
std::atomic<bool> g_force_parallel{false};
}

void set_force_parallel(bool on) { g_force_parallel.store(on, std::memory_order_relaxed); }
bool force_parallel() { return g_force_parallel.load(std::memory_order_relaxed); }

int num_threads() {
  int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : omp_get_max_threads();
}

}  // namespace parity::kernels
