#pragma once
// Storage dtypes that appear in checkpoints and parity's own files, and the exact widenings to fp32.
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace parity {

enum class DType { F32, F16, BF16, I32, I64 };

inline std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  return "?";
}

inline std::optional<DType> dtype_from_name(std::string_view s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  if (s == "I32") return DType::I32;
  if (s == "I64") return DType::I64;
  return std::nullopt;
}

// bf16 is the top half of an fp32: widening is a shift, exact by construction.
inline float bf16_to_f32(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays NaN (quiet bit forced so rounding cannot turn it into Inf).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

// IEEE half → fp32, exact (every half is representable in fp32), subnormals included.
inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (mant == 0) {
      u = sign;
    } else {  // subnormal: renormalise
      int e = -1;
      do { ++e; mant <<= 1; } while ((mant & 0x400u) == 0);
      mant &= 0x3ffu;
      u = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (mant << 13);
  } else {
    u = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace parity
