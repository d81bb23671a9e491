#pragma once
// The project's own sin/cos (for RoPE) and the double-precision exp/log/pow behind RoPE's inverse
// frequencies (DESIGN.md rule 4: never the C library's versions, which differ between releases).
//
// Unlike math.h these are evaluated in IEEE double and rounded to float once at the end: they run
// on scalars only (one cos/sin per position and frequency, shared by every head), so no SIMD twin
// has to reproduce them, and double arithmetic without contraction (-ffp-contract=off) is
// correctly rounded operation by operation, hence identical on every x86-64 machine. The only
// library calls are nearbyint, floor, frexp and ldexp, which are exact by IEEE definition.
// sincos_f also runs in CUDA kernels (src/kernels_cuda/attention.cu's RoPE): IEEE double with
// --fmad=false is the same correctly rounded arithmetic there, so the GPU's angles are the CPU's.
//
// sin_f / cos_f of a float x:
//   n = nearbyint(x · 2/π) (double), r = x − n·P1 − n·P2 − n·P3 − n·P4 (Cody–Waite, in that order),
//   where P1..P3 carry 28 significant bits of π/2 each and P4 the next 53: n·P1..n·P3 are exact for
//   |n| < 2^25, i.e. |x| < ~5e7, and r carries ~137 bits of π/2. Quadrant q = n mod 4 selects
//   ±sin(r) / ±cos(r) from Taylor polynomials (through r^15 and r^16) on |r| ≤ π/4, whose
//   truncation error is below 1e-16. Result: the float nearest the double value, i.e. within
//   ~0.5 ulp of the true value (tested against a float64 sweep). Larger |x| stays deterministic
//   but loses accuracy gradually (n·P1 rounds); NaN and ±inf give NaN.
#include <cmath>
#include <cstdint>

#include "kernels/math.h"  // PARITY_HD

namespace parity::kernels {

namespace trigc {
// π/2 = P1 + P2 + P3 + P4 (28 + 28 + 28 + 53 significant bits).
inline constexpr double kP1 = 0x1.921fb54p+0;
inline constexpr double kP2 = 0x1.10b461p-30;
inline constexpr double kP3 = 0x1.a62633p-58;
inline constexpr double kP4 = 0x1.45c06e0e68948p-86;
inline constexpr double kTwoOverPi = 0.6366197723675814;
// ln 2 = kLn2Hi + kLn2Lo, kLn2Hi with 32 significant bits so that e · kLn2Hi is exact for |e| < 2^21.
inline constexpr double kLn2Hi = 0x1.62e42feep-1;
inline constexpr double kLn2Lo = 1.9082149292705877e-10;
inline constexpr double kInvLn2 = 1.4426950408889634;
}  // namespace trigc

// sin and cos of the reduced argument |r| ≤ π/4 (plus a hair), Horner from the highest term.
PARITY_HD inline double sin_poly_d(double r) {
  const double r2 = r * r;
  double p = -1.0 / 1307674368000.0;  // -1/15!
  p = p * r2 + 1.0 / 6227020800.0;    //  1/13!
  p = p * r2 - 1.0 / 39916800.0;      // -1/11!
  p = p * r2 + 1.0 / 362880.0;        //  1/9!
  p = p * r2 - 1.0 / 5040.0;          // -1/7!
  p = p * r2 + 1.0 / 120.0;           //  1/5!
  p = p * r2 - 1.0 / 6.0;             // -1/3!
  return r + (r * r2) * p;
}

PARITY_HD inline double cos_poly_d(double r) {
  const double r2 = r * r;
  double p = 1.0 / 20922789888000.0;  //  1/16!
  p = p * r2 - 1.0 / 87178291200.0;   // -1/14!
  p = p * r2 + 1.0 / 479001600.0;     //  1/12!
  p = p * r2 - 1.0 / 3628800.0;       // -1/10!
  p = p * r2 + 1.0 / 40320.0;         //  1/8!
  p = p * r2 - 1.0 / 720.0;           // -1/6!
  p = p * r2 + 1.0 / 24.0;            //  1/4!
  p = p * r2 - 0.5;                   // -1/2!
  return 1.0 + r2 * p;
}

// Both at once: RoPE always needs the pair, and the reduction is the expensive part.
PARITY_HD inline void sincos_f(float x, float* s, float* c) {
  using namespace trigc;
  const double xd = x;
  if (!(std::fabs(xd) <= 3.4028234663852886e38)) {  // NaN or ±inf
    *s = *c = NAN;
    return;
  }
  const double n = std::nearbyint(xd * kTwoOverPi);
  double r = xd - n * kP1;
  r = r - n * kP2;
  r = r - n * kP3;
  r = r - n * kP4;
  const double q = n - 4.0 * std::floor(n * 0.25);  // n mod 4 in {0,1,2,3}, exact
  const double sr = sin_poly_d(r), cr = cos_poly_d(r);
  double sv, cv;
  if (q == 0.0) {
    sv = sr, cv = cr;
  } else if (q == 1.0) {
    sv = cr, cv = -sr;
  } else if (q == 2.0) {
    sv = -sr, cv = -cr;
  } else {
    sv = -cr, cv = sr;
  }
  *s = static_cast<float>(sv);
  *c = static_cast<float>(cv);
}

inline float sin_f(float x) {
  float s, c;
  sincos_f(x, &s, &c);
  return s;
}

inline float cos_f(float x) {
  float s, c;
  sincos_f(x, &s, &c);
  return c;
}

// Natural log for finite x > 0 in double, a few ulp: x = m·2^e with m in [√½, √2),
// s = (m−1)/(m+1), log m = 2s·(1 + s²/3 + … + s²⁰/21) (|s| ≤ 0.1716, truncation < 1e-17).
inline double log_d(double x) {
  using namespace trigc;
  int e;
  double m = std::frexp(x, &e);  // [0.5, 1)
  if (m < 0.70710678118654752) {
    m = m * 2.0;
    e -= 1;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 21;
  for (int k = 19; k >= 3; k -= 2) p = p * s2 + 1.0 / k;
  p = p * s2;  // s²/3 + s⁴/5 + …
  const double logm = 2.0 * s + (2.0 * s) * p;
  const double fe = e;
  return fe * kLn2Hi + (fe * kLn2Lo + logm);
}

// e^x in double: n = nearbyint(x / ln 2), r = x − n·ln2 (two parts), Taylor through r^13/13!
// on |r| ≤ ln2/2 (truncation < 5e-18), then the exact scaling ldexp(p, n).
inline double exp_d(double x) {
  using namespace trigc;
  if (!(x == x)) return x;
  if (x > 709.782712893384) return INFINITY;
  if (x < -745.1332191019412) return 0.0;
  const double n = std::nearbyint(x * kInvLn2);
  const double r = (x - n * kLn2Hi) - n * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  double fact = 6227020800.0;
  for (int k = 12; k >= 2; --k) {
    fact = fact / (k + 1);  // exact: k! stays an integer below 2^53
    p = p * r + 1.0 / fact;
  }
  p = p * r + 1.0;
  p = p * r + 1.0;
  return std::ldexp(p, static_cast<int>(n));
}

// base^e for base > 0, in double (relative error ~1e-15 for |e·log base| < 100).
inline double pow_d(double base, double e) { return exp_d(e * log_d(base)); }

}  // namespace parity::kernels
