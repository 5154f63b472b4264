// SPDX-License-Identifier: Apache-2.0
// TransformerEngine's 16-point random Hadamard transform (RHT), which NVFP4 applies to the columnwise
// (weight-gradient) copies of inputs and gradients to spread outliers over their 16-element groups.
// The matrix is M = D * H16 / 4: H16 the Sylvester Hadamard matrix (entry (r, c) = (-1)^popcount(r & c)),
// D the diagonal of TE's fixed sign vector. A group x (16 consecutive elements along the quantized
// dimension) becomes y = x M, y_c = sum_r x_r * M[r][c]. M is orthogonal (M M^T = I), so the inverse is
// x = y M^T, and a GEMM of two operands transformed along their shared dimension needs no inverse.
// Everything is a scalar constant or a function: device code reuses these unchanged.
#pragma once
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/half.hpp"

namespace tequant {

/// Elements of one transformed group.
inline constexpr std::uint32_t hadamard_size = 16;

/// Each entry's magnitude, 1 / sqrt(16).
inline constexpr float hadamard_scale = 0.25f;

/// TE's fixed sign vector for NVFP4 (get_wgrad_sign_vector: +1 +1 +1 -1 +1 -1 -1 -1 -1 -1 -1 +1 -1 +1
/// -1 -1) as TE's bit mask (get_sign_from_vector): bit r set where sign r is -1.
inline constexpr std::uint16_t hadamard_sign_mask = 0xD7E8;

/// True when M[r][c] is negative (r, c < 16): the sign of row r times H16's sign.
TEQUANT_HD constexpr bool hadamard_negative(std::uint32_t r, std::uint32_t c) noexcept {
  const std::uint32_t rc = r & c;
  const std::uint32_t h_parity = (rc ^ (rc >> 1) ^ (rc >> 2) ^ (rc >> 3)) & 1u;
  return (h_parity ^ ((hadamard_sign_mask >> r) & 1u)) != 0;
}

/// M[r][c]: +-0.25.
TEQUANT_HD constexpr float hadamard_entry(std::uint32_t r, std::uint32_t c) noexcept {
  return hadamard_negative(r, c) ? -hadamard_scale : hadamard_scale;
}

/// y_c = sum_r x_r * M[r][c] in fp32, without TE's final bf16 rounding: the signed sum in row order from
/// +0, times 0.25 (exact outside the subnormal range, where it equals summing the scaled products).
TEQUANT_HD constexpr float hadamard_column_fp32(const float* x, std::uint32_t c, std::uint32_t stride = 1) noexcept {
  float acc = 0.0f;
  for (std::uint32_t r = 0; r < hadamard_size; ++r) {
    const float v = x[r * stride];
    acc = hadamard_negative(r, c) ? acc - v : acc + v;
  }
  return acc * hadamard_scale;
}

/// The forward transform as TE's kernels round it: the fp32 sum of hadamard_column_fp32 rounded to
/// nearest-even bf16 (the kernels convert the MMA's fp32 accumulators with cvt.rn.bf16x2.f32, and both
/// the amax and the cast read those bf16 values). Returned widened to float. `stride` steps between x's
/// 16 elements (a column of a row-major matrix).
TEQUANT_HD constexpr float hadamard_column(const float* x, std::uint32_t c, std::uint32_t stride = 1) noexcept {
  return to_float(to_bf16(hadamard_column_fp32(x, c, stride)));
}

/// x_r = sum_c y_c * M[r][c] (y M^T) in fp32: the inverse of the transform, in column order from +0.
TEQUANT_HD constexpr float hadamard_inverse_row(const float* y, std::uint32_t r) noexcept {
  float acc = 0.0f;
  for (std::uint32_t c = 0; c < hadamard_size; ++c) acc = hadamard_negative(r, c) ? acc - y[c] : acc + y[c];
  return acc * hadamard_scale;
}

}  // namespace tequant
