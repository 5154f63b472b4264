// SPDX-License-Identifier: Apache-2.0
// FP8 E4M3 (no inf, max 448) and E5M2 (max 57344) encode/decode, bit-exact with NVIDIA's
// satfinite conversion: round to nearest even, saturate to +-max (inf included), every NaN -> 0x7F,
// sign of zero kept.
#pragma once
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/format/bits.hpp"

namespace tequant {

/// The two FP8 element types.
enum class fp8_dtype : std::uint8_t { e4m3, e5m2 };

/// Largest finite value of an FP8 element type.
TEQUANT_HD constexpr float fp8_max(fp8_dtype t) noexcept { return t == fp8_dtype::e4m3 ? 448.0f : 57344.0f; }

constexpr const char* to_string(fp8_dtype t) noexcept { return t == fp8_dtype::e4m3 ? "e4m3" : "e5m2"; }

namespace detail {

/// One formula for both formats. MantBits/Bias describe the target; MaxCode is the largest finite code.
template <int MantBits, int Bias, std::uint8_t MaxCode>
TEQUANT_HD constexpr std::uint8_t encode_fp8(float x) noexcept {
  const std::uint32_t u = float_bits(x);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return 0x7F;  // NVIDIA canonicalises NaN first: sign dropped, mantissa all ones
  const auto sign = static_cast<std::uint8_t>((u >> 24) & 0x80u);
  // Largest finite value as float bits: exponent (MaxCode >> MantBits) - Bias, mantissa MaxCode's low bits.
  constexpr std::uint32_t max_exp = (MaxCode >> MantBits) - Bias + 127;
  constexpr std::uint32_t max_bits = (max_exp << 23) | ((MaxCode & ((1u << MantBits) - 1)) << (23 - MantBits));
  if (a >= max_bits) return sign | MaxCode;  // everything at or above max (inf too) rounds/saturates to max
  const std::uint32_t e = a >> 23;           // biased float exponent
  constexpr std::uint32_t min_normal_e = 127 - Bias + 1;
  std::uint32_t code;
  if (e >= min_normal_e) {
    constexpr int drop = 23 - MantBits;
    const std::uint32_t rebased = a - ((127u - Bias) << 23);
    code = (rebased + ((1u << (drop - 1)) - 1) + ((rebased >> drop) & 1u)) >> drop;
  } else {
    // Subnormal target: value / 2^(1-Bias-MantBits) rounded to nearest even, from the 24-bit significand.
    const std::uint32_t m = (a & 0x7FFFFFu) | (e ? 0x800000u : 0u);
    const std::uint32_t shift = (150u + 1u - Bias - MantBits) - (e ? e : 1u);
    if (shift >= 32) {
      code = 0;
    } else {
      code = (m + ((1u << (shift - 1)) - 1) + ((m >> shift) & 1u)) >> shift;
    }
  }
  return static_cast<std::uint8_t>(sign | code);
}

template <int MantBits, int Bias>
TEQUANT_HD constexpr float decode_fp8(std::uint8_t q) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(q & 0x80u) << 24;
  const std::uint32_t e = (q & 0x7Fu) >> MantBits;
  const std::uint32_t m = q & ((1u << MantBits) - 1);
  if (e == 0) {
    // Subnormal: m * 2^(1-Bias-MantBits), exact in float.
    const float mag = static_cast<float>(m) * bits_float(static_cast<std::uint32_t>(127 + 1 - Bias - MantBits) << 23);
    return bits_float(float_bits(mag) | sign);
  }
  return bits_float(sign | ((e - Bias + 127) << 23) | (m << (23 - MantBits)));
}

}  // namespace detail

TEQUANT_HD constexpr std::uint8_t encode_e4m3(float x) noexcept { return detail::encode_fp8<3, 7, 0x7E>(x); }
TEQUANT_HD constexpr std::uint8_t encode_e5m2(float x) noexcept { return detail::encode_fp8<2, 15, 0x7B>(x); }

TEQUANT_HD constexpr float decode_e4m3(std::uint8_t q) noexcept {
  if ((q & 0x7Fu) == 0x7Fu) return detail::bits_float(0x7FFFFFFFu);  // E4M3 has NaN only at S.1111.111
  return detail::decode_fp8<3, 7>(q);
}

TEQUANT_HD constexpr float decode_e5m2(std::uint8_t q) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(q & 0x80u) << 24;
  if ((q & 0x7Cu) == 0x7Cu) {  // exponent all ones: inf or NaN, as in IEEE
    return detail::bits_float(sign | ((q & 0x3u) ? 0x7FC00000u : 0x7F800000u));
  }
  return detail::decode_fp8<2, 15>(q);
}

TEQUANT_HD constexpr std::uint8_t encode_fp8(fp8_dtype t, float x) noexcept {
  return t == fp8_dtype::e4m3 ? encode_e4m3(x) : encode_e5m2(x);
}
TEQUANT_HD constexpr float decode_fp8(fp8_dtype t, std::uint8_t q) noexcept {
  return t == fp8_dtype::e4m3 ? decode_e4m3(q) : decode_e5m2(q);
}

}  // namespace tequant
