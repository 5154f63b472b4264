// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "tequant/config.hpp"
#include "tequant/format/bits.hpp"

namespace tequant {

/// Scale for the stateless recipes (TE's compute_scale_from_amax), `q = sat_cast(x * scale)`:
/// amax is floored at eps; amax 0, inf or NaN gives 1 (not "keep the old scale"); fp8_max / amax uses
/// IEEE division; an infinite quotient becomes value_for_inf; pow2 truncates to a power of two (rounds down).
TEQUANT_HD constexpr float scale_from_amax(float amax, float fp8_max, bool pow2 = false, float eps = 0.0f,
                                           float value_for_inf = detail::float_max) noexcept {
  if (amax < eps) amax = eps;  // a NaN comparison is false: NaN stays NaN and is caught below
  if (amax == 0.0f || !detail::is_finite(amax)) return 1.0f;
  float s = detail::div_rn(fp8_max, amax);
  if (detail::is_inf(s)) s = value_for_inf;
  if (pow2) s = detail::bits_float(detail::float_bits(s) & 0xFF800000u);
  return s;
}

/// 1/scale as the quantized data stores it.
TEQUANT_HD constexpr float scale_inverse(float scale) noexcept { return detail::div_rn(1.0f, scale); }

}  // namespace tequant
