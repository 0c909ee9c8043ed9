// Host-side conversions between fp16 / bf16 bits and float (round to nearest even), and a
// typed element loader used by the CPU backend and the reference.
#pragma once
#include <cstdint>
#include <cstring>

#include "flashtrain/tensor.h"

namespace flashtrain {

inline float bits_to_float(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
inline uint32_t float_to_bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
}

inline float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

inline uint16_t float_to_bf16(float f) {
  const uint32_t bits = float_to_bits(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_float(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    // zero or subnormal: man * 2^-24
    const float mag = static_cast<float>(man) * 5.9604644775390625e-08f;
    return sign ? -mag : mag;
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

inline uint16_t float_to_fp16(float f) {
  const uint32_t bits = float_to_bits(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;     // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;    // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                          // below 2^-14: subnormal or zero
    const float mag = bits_to_float(abs);
    // Round mag / 2^-24 to nearest even integer.
    const float scaled = mag * 16777216.0f;
    uint32_t q = static_cast<uint32_t>(scaled);
    const float frac = scaled - static_cast<float>(q);
    if (frac > 0.5f || (frac == 0.5f && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // Normal: rebias exponent 127 -> 15, round mantissa 23 -> 10 bits, to nearest even.
  const uint32_t rebiased = abs - (112u << 23);
  const uint32_t rounding = 0xfffu + ((rebiased >> 13) & 1u);
  return static_cast<uint16_t>(sign | ((rebiased + rounding) >> 13));
}

// Reads element `index` (in elements) of a buffer of dtype `dtype` as double.
inline double load_as_double(const void* base, DType dtype, int64_t index) {
  switch (dtype) {
    case DType::kFloat16: return fp16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kBFloat16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
    case DType::kFloat32: return static_cast<const float*>(base)[index];
    case DType::kFloat64: return static_cast<const double*>(base)[index];
    case DType::kInt32: return static_cast<const int32_t*>(base)[index];
  }
  return 0.0;
}

// Writes `value` rounded to `dtype` at element `index`.
inline void store_from_double(void* base, DType dtype, int64_t index, double value) {
  switch (dtype) {
    case DType::kFloat16: static_cast<uint16_t*>(base)[index] = float_to_fp16(static_cast<float>(value)); break;
    case DType::kBFloat16: static_cast<uint16_t*>(base)[index] = float_to_bf16(static_cast<float>(value)); break;
    case DType::kFloat32: static_cast<float*>(base)[index] = static_cast<float>(value); break;
    case DType::kFloat64: static_cast<double*>(base)[index] = value; break;
    case DType::kInt32: static_cast<int32_t*>(base)[index] = static_cast<int32_t>(value); break;
  }
}

// Rounds a double to the precision of dtype (used by the input-dtype reference).
inline double round_to(DType dtype, double value) {
  switch (dtype) {
    case DType::kFloat16: return fp16_to_float(float_to_fp16(static_cast<float>(value)));
    case DType::kBFloat16: return bf16_to_float(float_to_bf16(static_cast<float>(value)));
    case DType::kFloat32: return static_cast<float>(value);
    default: return value;
  }
}

}  // namespace flashtrain
