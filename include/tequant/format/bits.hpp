// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <cstdint>

#include "tequant/config.hpp"

namespace tequant::detail {

// __builtin_bit_cast is constexpr and usable in device code on g++, clang and nvcc alike;
// std::bit_cast is a host-only function under nvcc.
TEQUANT_HD constexpr std::uint32_t float_bits(float f) noexcept { return __builtin_bit_cast(std::uint32_t, f); }
TEQUANT_HD constexpr float bits_float(std::uint32_t u) noexcept { return __builtin_bit_cast(float, u); }

TEQUANT_HD constexpr bool is_nan(float f) noexcept { return (float_bits(f) & 0x7FFFFFFFu) > 0x7F800000u; }
TEQUANT_HD constexpr bool is_inf(float f) noexcept { return (float_bits(f) & 0x7FFFFFFFu) == 0x7F800000u; }
TEQUANT_HD constexpr bool is_finite(float f) noexcept { return (float_bits(f) & 0x7F800000u) != 0x7F800000u; }
TEQUANT_HD constexpr float abs_value(float f) noexcept { return bits_float(float_bits(f) & 0x7FFFFFFFu); }

/// IEEE fmax: a NaN operand is ignored, so a running amax skips NaN inputs.
TEQUANT_HD constexpr float nan_ignoring_max(float a, float b) noexcept {
  if (is_nan(a)) return b;
  if (is_nan(b)) return a;
  return a < b ? b : a;
}

/// IEEE round-to-nearest division on host and device alike: under nvcc a plain `/` becomes an
/// approximation when the user builds with --use_fast_math (-prec-div=false); __fdiv_rn never does.
TEQUANT_HD constexpr float div_rn(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

inline constexpr float float_max = 3.40282346638528859811704183484516925e+38f;

}  // namespace tequant::detail
