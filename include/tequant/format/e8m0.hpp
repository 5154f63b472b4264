// SPDX-License-Identifier: Apache-2.0
// E8M0 block scales for MXFP8: an 8-bit biased exponent, 255 = NaN.
#pragma once
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/format/bits.hpp"

namespace tequant {

/// Biased exponent of |v| rounded toward +inf, clamped to [0, 254]; NaN -> 255, inf -> 254.
/// The block scale 2^(e-127) is therefore never smaller than v (TE's software float_to_e8m0).
TEQUANT_HD constexpr std::uint8_t encode_e8m0(float v) noexcept {
  if (detail::is_nan(v)) return 0xFF;
  if (detail::is_inf(v)) return 0xFE;
  const std::uint32_t a = detail::float_bits(v) & 0x7FFFFFFFu;
  auto e = static_cast<std::uint32_t>(a >> 23);
  const std::uint32_t m = a & 0x7FFFFFu;
  // A float denormal at or below 2^-127 already fits exponent 0; a larger one needs exponent 1.
  if (m != 0 && e != 0xFE && !(e == 0 && m <= 0x400000u)) ++e;
  return static_cast<std::uint8_t>(e);
}

/// The block scale 2^(e-127) as a float (the dequantisation factor); 255 -> NaN.
TEQUANT_HD constexpr float decode_e8m0(std::uint8_t e) noexcept {
  if (e == 0xFF) return detail::bits_float(0x7FC00000u);
  if (e == 0) return detail::bits_float(0x00400000u);  // 2^-127 is a float denormal
  return detail::bits_float(static_cast<std::uint32_t>(e) << 23);
}

/// The quantisation multiplier 2^(127-e), built from bits so it is exact for every code.
TEQUANT_HD constexpr float e8m0_multiplier(std::uint8_t e) noexcept {
  if (e == 0xFF) return detail::bits_float(0x7FC00000u);
  if (e == 0xFE) return detail::bits_float(0x00400000u);  // 2^-127
  return detail::bits_float(static_cast<std::uint32_t>(254u - e) << 23);
}

/// The factor an MXFP8 cast multiplies by, exactly as TransformerEngine's kernels: its reciprocal
/// helper returns 1 for code 0 (so blocks whose amax is below ~2.6e-36 keep their values unscaled and
/// flush to 0), and 2^-127 for code 254 is flushed to zero (so an inf in a block becomes NaN, the
/// 0x7F code, and its finite neighbours become 0). Every other code gives e8m0_multiplier(e); 255 -> NaN.
TEQUANT_HD constexpr float e8m0_cast_multiplier(std::uint8_t e) noexcept {
  if (e == 0) return 1.0f;
  if (e == 0xFE) return 0.0f;
  return e8m0_multiplier(e);
}

}  // namespace tequant
