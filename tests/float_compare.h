#pragma once
// Comparing float arrays, for the CPU tests (test_support.h) and the GPU tests (cuda/gpu_test_support.h)
// alike: no CUDA here, so a header both suites include can use it.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

namespace parity::test {

// Bit-for-bit equality of float arrays (memcmp: -0 differs from 0, a NaN equals its own bits).
// n == 0 compares nothing, so empty vectors' null data() never reaches memcmp.
inline bool same_bits(const float* a, const float* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

// ‖got − ref‖ / ‖ref‖ over all elements (Frobenius), in double.
inline double relative_error(const std::vector<float>& got, const float* ref) {
  double n = 0, d = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double e = double(got[i]) - ref[i];
    n += e * e;
    d += double(ref[i]) * ref[i];
  }
  return std::sqrt(n / d);
}

}  // namespace parity::test
