// SPDX-License-Identifier: Apache-2.0
// bf16 and fp16 storage types with round-to-nearest-even conversion from float and exact widening.
#pragma once
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/format/bits.hpp"

namespace tequant {

/// bfloat16 as raw bits; layout-compatible with __nv_bfloat16 and torch::kBFloat16.
struct bf16 {
  std::uint16_t bits;
  friend constexpr bool operator==(bf16, bf16) = default;
};

/// IEEE binary16 as raw bits; layout-compatible with __half and torch::kHalf.
struct fp16 {
  std::uint16_t bits;
  friend constexpr bool operator==(fp16, fp16) = default;
};

TEQUANT_HD constexpr float to_float(bf16 h) noexcept { return detail::bits_float(static_cast<std::uint32_t>(h.bits) << 16); }
TEQUANT_HD constexpr float to_float(float f) noexcept { return f; }

TEQUANT_HD constexpr bf16 to_bf16(float f) noexcept {
  const std::uint32_t u = detail::float_bits(f);
  if (detail::is_nan(f)) return bf16{static_cast<std::uint16_t>((u >> 16) | 0x0040u)};  // keep NaN quiet
  return bf16{static_cast<std::uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)};
}

TEQUANT_HD constexpr float to_float(fp16 h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000u) << 16;
  const std::uint32_t e = (h.bits >> 10) & 0x1Fu;
  const std::uint32_t m = h.bits & 0x3FFu;
  if (e == 0x1F) return detail::bits_float(sign | 0x7F800000u | (m << 13));
  if (e == 0) {  // subnormal: m * 2^-24, exact
    const float mag = static_cast<float>(m) * detail::bits_float(0x33800000u);
    return detail::bits_float(detail::float_bits(mag) | sign);
  }
  return detail::bits_float(sign | ((e + 112u) << 23) | (m << 13));
}

TEQUANT_HD constexpr fp16 to_fp16(float f) noexcept {
  const std::uint32_t u = detail::float_bits(f);
  const auto sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return fp16{static_cast<std::uint16_t>(sign | 0x7E00u | ((a >> 13) & 0x3FFu))};
  if (a >= 0x477FF000u) return fp16{static_cast<std::uint16_t>(sign | 0x7C00u)};  // rounds past 65504: inf
  const std::uint32_t e = a >> 23;
  if (e >= 113) {  // normal half
    const std::uint32_t r = a - (112u << 23);
    return fp16{static_cast<std::uint16_t>(sign | ((r + 0xFFFu + ((r >> 13) & 1u)) >> 13))};
  }
  const std::uint32_t m = (a & 0x7FFFFFu) | (e ? 0x800000u : 0u);
  const std::uint32_t shift = 126u - (e ? e : 1u);  // value / 2^-24 from the 24-bit significand
  if (shift >= 32) return fp16{sign};
  return fp16{static_cast<std::uint16_t>(sign | ((m + ((1u << (shift - 1)) - 1) + ((m >> shift) & 1u)) >> shift))};
}

}  // namespace tequant
