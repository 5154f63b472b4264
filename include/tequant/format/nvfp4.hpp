// SPDX-License-Identifier: Apache-2.0
// NVFP4's two-level scaling as TransformerEngine's kernels compute it (core_nvfp4.cuh): a per-tensor
// fp32 encode scale S_enc from the tensor's amax, an E4M3 decode scale per 16-element block, and the
// per-block multiplier the elements are scaled by before their E2M1 cast. Every fp32 operation is in
// the kernels' order: an "equivalent" order rounds differently near E4M3 boundaries.
#pragma once
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e2m1.hpp"
#include "tequant/format/fp8.hpp"

namespace tequant {

/// Elements per NVFP4 block (and the side of a 2D tile).
inline constexpr std::uint32_t nvfp4_block = 16;

/// S_enc = (448 * 6) / amax, capped at FLT_MAX; 1 when amax is 0 or infinite (the quotient is then 0).
/// `amax` is the tensor's max |x| with NaN ignored, as the kernels' amax passes compute it.
TEQUANT_HD constexpr float nvfp4_global_encode_scale(float amax) noexcept {
  float s = detail::div_rn(448.0f * 6.0f, amax);
  s = detail::is_nan(s) || s > detail::float_max ? detail::float_max : s;  // fminf(s, FLT_MAX)
  if (amax == 0.0f || s == 0.0f) return 1.0f;
  return s;
}

/// The block's E4M3 decode scale: e4m3(block_amax * (S_enc * (1/6))), saturating like the kernels' cast.
TEQUANT_HD constexpr std::uint8_t nvfp4_block_scale(float block_amax, float global_encode_scale) noexcept {
  constexpr float inv_fp4_max = 1.0f / e2m1_max;
  return encode_e4m3(block_amax * (global_encode_scale * inv_fp4_max));
}

/// What a block's elements are multiplied by before their E2M1 cast: fminf(1 / (scale * S_dec), FLT_MAX),
/// with S_dec = 1 / S_enc computed once per tensor (`global_decode_scale`). A zero block scale gives FLT_MAX.
TEQUANT_HD constexpr float nvfp4_block_multiplier(std::uint8_t block_scale, float global_decode_scale) noexcept {
  const float m = detail::div_rn(1.0f, decode_e4m3(block_scale) * global_decode_scale);
  return detail::is_nan(m) || m > detail::float_max ? detail::float_max : m;
}

}  // namespace tequant
