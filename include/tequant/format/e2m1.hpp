// SPDX-License-Identifier: Apache-2.0
// FP4 E2M1 (NVFP4's element type): values +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}, no inf, no NaN. Encoding is
// bit-exact with NVIDIA's satfinite conversion (__nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)):
// round to nearest even, saturate to +-6 (inf included), every NaN -> +6 (0x7), sign of zero kept
// (-0.0 and negative values that round to zero give 0x8).
#pragma once
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/format/bits.hpp"

namespace tequant {

/// Largest finite E2M1 value.
inline constexpr float e2m1_max = 6.0f;

namespace detail {

// The round-to-nearest-even decision points between neighbouring magnitudes, as float bits. A tie goes
// to the even code: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0, 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5.0 -> 4.0.
// So the code is the number of points a magnitude passes: strictly above the ties that round down
// (0.25, 1.25, 2.5, 5), at or above the ones that round up (0.75, 1.75, 3.5).
inline constexpr std::uint32_t e2m1_tie_down[4] = {0x3E800000u /*0.25*/, 0x3FA00000u /*1.25*/,
                                                   0x40200000u /*2.5*/, 0x40A00000u /*5*/};
inline constexpr std::uint32_t e2m1_tie_up[3] = {0x3F400000u /*0.75*/, 0x3FE00000u /*1.75*/,
                                                 0x40600000u /*3.5*/};

}  // namespace detail

/// Round to nearest even, saturating; the code in the low 4 bits (sign in bit 3).
TEQUANT_HD constexpr std::uint8_t encode_e2m1(float x) noexcept {
  const std::uint32_t u = detail::float_bits(x);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7;  // NaN saturates to +max, sign dropped (as NVIDIA's conversion)
  // Local copies: device code may not index a namespace-scope array, only read its constant elements.
  constexpr std::uint32_t tie_down[4] = {detail::e2m1_tie_down[0], detail::e2m1_tie_down[1], detail::e2m1_tie_down[2],
                                         detail::e2m1_tie_down[3]};
  constexpr std::uint32_t tie_up[3] = {detail::e2m1_tie_up[0], detail::e2m1_tie_up[1], detail::e2m1_tie_up[2]};
  std::uint32_t code = 0;
  for (const std::uint32_t t : tie_down) code += a > t ? 1u : 0u;
  for (const std::uint32_t t : tie_up) code += a >= t ? 1u : 0u;
  return static_cast<std::uint8_t>(((u >> 28) & 0x8u) | code);
}

/// The value of a code (low 4 bits used).
TEQUANT_HD constexpr float decode_e2m1(std::uint8_t q) noexcept {
  constexpr float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  const float m = magnitude[q & 0x7u];
  return (q & 0x8u) != 0 ? -m : m;
}

/// Stochastic rounding to E2M1: a magnitude between neighbours lo < hi rounds up with probability
/// (|x| - lo) / (hi - lo), decided by the top 24 bits of `random` (uniform 32-bit). Saturates to +-6 and
/// maps NaN to +6 like encode_e2m1; exact values never move. The distribution, not any bit stream, is
/// what matches TE's hardware stochastic conversion.
TEQUANT_HD constexpr std::uint8_t encode_e2m1_stochastic(float x, std::uint32_t random) noexcept {
  const std::uint32_t u = detail::float_bits(x);
  const std::uint32_t a_bits = u & 0x7FFFFFFFu;
  if (a_bits > 0x7F800000u) return 0x7;
  const auto sign = static_cast<std::uint8_t>((u >> 28) & 0x8u);
  const float a = detail::bits_float(a_bits);
  if (a >= 6.0f) return sign | 0x7u;
  // The code whose value is the largest not above a (values are increasing in the code).
  constexpr float magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  std::uint8_t lo = 0;
  for (std::uint8_t c = 1; c < 7; ++c) lo = a >= magnitude[c] ? c : lo;
  // Neighbours are 0.5, 1 or 2 apart and within a factor two of each other above 0.5, so a - lo is
  // exact and the division by the power-of-two step too (div_rn: exact on the device even under
  // --use_fast_math, where a plain `/` is an approximation).
  const float frac = detail::div_rn(a - magnitude[lo], magnitude[lo + 1] - magnitude[lo]);
  const float draw = static_cast<float>(random >> 8) * 0x1p-24f;  // [0, 1) in steps of 2^-24, exact
  return static_cast<std::uint8_t>(sign | (draw < frac ? lo + 1 : lo));
}

}  // namespace tequant
