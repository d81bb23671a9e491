#pragma once
// The project's own transcendentals (DESIGN.md rule 4): fixed sequences of fp32 operations with
// explicit FMAs, so the result never depends on the C library. SIMD kernels must evaluate the
// very same sequence lane by lane (same constants, same order, same FMAs); tests check that.
// sqrt and division are IEEE correctly rounded everywhere, so they are used as they are.
#include <cmath>
#include <cstdint>
#include <cstring>

// The same sequences run in CUDA kernels (src/kernels_cuda), so a GPU exp is the CPU's exp.
#if defined(__CUDACC__)
#define PARITY_HD __host__ __device__
#else
#define PARITY_HD
#endif

namespace parity::kernels {

namespace mathc {
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693145751953125f;       // 12 significant bits: n·kLn2Hi is exact
inline constexpr float kLn2Lo = 1.42860682030941723e-06f;
inline constexpr float kExpMax = 88.72283935546875f;       // above: +inf
inline constexpr float kExpMin = -103.97208404541015625f;  // below: 0
// Taylor coefficients 1/k!, k = 2..7: on |r| <= ln2/2 the truncation error is < 6e-9 relative.
inline constexpr float kE2 = 0.5f, kE3 = 1.0f / 6, kE4 = 1.0f / 24, kE5 = 1.0f / 120, kE6 = 1.0f / 720,
                       kE7 = 1.0f / 5040;
// atanh series 2(s + s^3/3 + ... + s^9/9) for log(m), m in [sqrt(1/2), sqrt(2)).
inline constexpr float kL3 = 1.0f / 3, kL5 = 1.0f / 5, kL7 = 1.0f / 7, kL9 = 1.0f / 9;
inline constexpr float kSqrtHalf = 0.70710678118654752f;
}  // namespace mathc

PARITY_HD inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
PARITY_HD inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// 2^n for integer n in [-252, 254], as a product of two normal powers so subnormal results round once.
PARITY_HD inline float exp2i_scale(float p, int n) {
  int n1 = n / 2;
  int n2 = n - n1;
  return p * bits_to_float(static_cast<uint32_t>(n1 + 127) << 23) * bits_to_float(static_cast<uint32_t>(n2 + 127) << 23);
}

PARITY_HD inline float exp_f(float x) {
  using namespace mathc;
  if (!(x == x)) return x;  // NaN
  if (x > kExpMax) return INFINITY;
  if (x < kExpMin) return 0.0f;
  float n = std::nearbyint(x * kLog2e);
  float r = std::fma(-n, kLn2Hi, x);
  r = std::fma(-n, kLn2Lo, r);
  float p = kE7;
  p = std::fma(p, r, kE6);
  p = std::fma(p, r, kE5);
  p = std::fma(p, r, kE4);
  p = std::fma(p, r, kE3);
  p = std::fma(p, r, kE2);
  p = std::fma(p, r, 1.0f);
  p = std::fma(p, r, 1.0f);
  return exp2i_scale(p, static_cast<int>(n));
}

// Natural log for finite v > 0 (callers guarantee it).
PARITY_HD inline float log_f(float v) {
  using namespace mathc;
  uint32_t u = float_to_bits(v);
  int e;
  if ((u & 0x7f800000u) == 0) {  // subnormal: scale into the normal range first
    v = v * 8388608.0f;          // 2^23
    u = float_to_bits(v);
    e = static_cast<int>((u >> 23) & 0xff) - 127 - 23;
  } else {
    e = static_cast<int>((u >> 23) & 0xff) - 127;
  }
  float m = bits_to_float((u & 0x007fffffu) | 0x3f800000u);  // [1, 2)
  if (m >= 2.0f * kSqrtHalf) {  // fold into [sqrt(1/2), sqrt(2))
    m = m * 0.5f;
    e += 1;
  }
  float f = m - 1.0f;
  float s = f / (2.0f + f);
  float s2 = s * s;
  float q = kL9;
  q = std::fma(q, s2, kL7);
  q = std::fma(q, s2, kL5);
  q = std::fma(q, s2, kL3);
  q = q * s2;
  float logm = std::fma(2.0f * s, q, 2.0f * s);
  float fe = static_cast<float>(e);
  return std::fma(fe, kLn2Hi, std::fma(fe, kLn2Lo, logm));
}

// log(1 + y) for y >= 0 (finite), with the classic correction for the rounding of 1 + y.
PARITY_HD inline float log1p_f(float y) {
  float u = 1.0f + y;
  if (u == 1.0f) return y;
  return log_f(u) - ((u - 1.0f) - y) / u;
}

// softplus with PyTorch's threshold 20 (F.softplus default, as HF and vLLM use).
PARITY_HD inline float softplus_f(float x) { return x > 20.0f ? x : log1p_f(exp_f(x)); }

PARITY_HD inline float sigmoid_f(float x) { return 1.0f / (1.0f + exp_f(-x)); }

PARITY_HD inline float silu_f(float x) { return x / (1.0f + exp_f(-x)); }

}  // namespace parity::kernels
