#pragma once
// GPU tests run only where a CUDA device is visible; elsewhere (CI compiles them but has no GPU)
// every one of them reports itself as not run, never as passed.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "common/dtype.h"
#include "kernels_cuda/ops.h"
#include "tests/float_compare.h"  // same_bits, relative_error

#define PARITY_REQUIRE_GPU()                                                             \
  do {                                                                                   \
    if (::parity::cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test not run"; \
  } while (0)

namespace parity::test {

// The fixtures folder: PARITY_TEST_DATA from the environment (a build carried to another machine),
// else the source tree's tests/data.
inline std::string test_data() {
  const char* e = std::getenv("PARITY_TEST_DATA");
  return e ? e : PARITY_TEST_DATA;
}

// Sanitizer mode: scripts/sanitize-gpu.sh runs every test under compute-sanitizer with PARITY_GPU_SANITIZE=1,
// where a launch costs hundreds of times its plain time (racecheck most: it tracks every shared-memory
// access). There a test sweeps fewer cases on smaller operands: every kernel, variant, tile, way and code
// path it launches normally (M = 1, odd M, tile edges, tails, both dtypes, exact and plain), with the same
// assertions, on less work. A normal run (the variable unset or "0") sweeps everything.
inline bool sanitizing() {
  static const bool on = [] {
    const char* e = std::getenv("PARITY_GPU_SANITIZE");
    return e != nullptr && *e != '\0' && std::strcmp(e, "0") != 0;
  }();
  return on;
}

// What a test sweeps or sizes: `full` normally, `sanitized` in sanitizer mode. The one place a test
// chooses; a sanitized list keeps the full list's edge cases.
template <class T>
T pick(T full, T sanitized) {
  return sanitizing() ? std::move(sanitized) : std::move(full);
}
template <class T>
std::vector<T> sweep(std::initializer_list<T> full, std::initializer_list<T> sanitized) {
  return sanitizing() ? std::vector<T>(sanitized) : std::vector<T>(full);
}

// A state-dtype sweep (false: fp32, true: bf16): both normally; in sanitizer mode one, alternating with
// the index i of the case it belongs to, so that a test's cases still cover each.
inline std::vector<bool> bf16_sweep(int i) {
  return sanitizing() ? std::vector<bool>{i % 2 == 1} : std::vector<bool>{false, true};
}

inline std::vector<float> uniform(std::size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

inline std::vector<float> round_bf16(std::vector<float> v) {
  for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
  return v;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}

// Empty when a and b hold the same bits; else how many elements differ and the first one: its
// index (row and column for a row length `cols`), both values and both bit patterns. For a failure
// message read from a log.
inline std::string bit_difference(const float* a, const float* b, std::size_t n, std::size_t cols = 0) {
  std::size_t first = n, count = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (std::memcmp(a + i, b + i, 4) != 0) {
      if (first == n) first = i;
      ++count;
    }
  if (count == 0) return "";
  uint32_t ba = 0, bb = 0;
  std::memcpy(&ba, a + first, 4);
  std::memcpy(&bb, b + first, 4);
  char buf[192];
  std::snprintf(buf, sizeof buf, "%zu of %zu differ; first at %zu (row %zu, column %zu): %.9g vs %.9g (0x%08x vs 0x%08x)",
                count, n, first, cols ? first / cols : 0, cols ? first % cols : first, double(a[first]), double(b[first]),
                ba, bb);
  return buf;
}

}  // namespace parity::test
