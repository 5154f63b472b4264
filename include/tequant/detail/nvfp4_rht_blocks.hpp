// SPDX-License-Identifier: Apache-2.0
// NVFP4's random Hadamard transform (RHT) of the columnwise copy, one 16-row group at a time, as
// __host__ __device__ functions. host_backend's RHT cast and inverse (detail/host_nvfp4_rht.hpp,
// host_kernels.hpp) call them, and each thread of the CUDA RHT kernels (backend/cuda/nvfp4_kernels.cuh)
// runs one of the per-group functions below, so the host and the device cannot drift apart; a host test
// (tests/backend/nvfp4_blocks_test.cpp) also runs the kernels' per-thread functions over every group
// against host_backend. The rule is TE's RHT-cast fusion kernel: each 16-row group of a column times
// M = D * H16 / 4 in fp32 (format/hadamard.hpp), rounded to bf16; S_enc from the amax of those values
// (NaN ignored); block scale e4m3((block_amax / 6) * S_enc) with a NaN in the block propagating into its
// amax. With rows a multiple of 16, a columnwise block is exactly one transformed group.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/detail/nvfp4_blocks.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e2m1.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/hadamard.hpp"
#include "tequant/format/half.hpp"
#include "tequant/format/nvfp4.hpp"

namespace tequant::detail {

static_assert(hadamard_size == nvfp4_block, "a transformed group is one NVFP4 block");

/// The 16 values x[r * stride] (r < 16) widened exactly and transformed: y[c] = hadamard_column (fp32
/// sums in row order, rounded to bf16), widened to float.
template <class T>
TEQUANT_HD constexpr void nvfp4_rht_group(const T* x, std::size_t stride, float* y) noexcept {
  float g[hadamard_size] = {};
  for (std::uint32_t r = 0; r < hadamard_size; ++r) g[r] = to_float(x[r * stride]);
  for (std::uint32_t c = 0; c < hadamard_size; ++c) y[c] = hadamard_column(g, c);
}

/// Max |v| of n values with NaN propagating (any NaN gives that NaN): the fused kernel's block amax.
TEQUANT_HD constexpr float nan_propagating_amax(const float* v, std::size_t n) noexcept {
  float a = 0.0f;
  for (std::size_t i = 0; i < n; ++i) {
    if (is_nan(v[i])) return v[i];
    const float m = v[i] < 0.0f ? -v[i] : v[i];
    a = m > a ? m : a;
  }
  return a;
}

/// The fused kernel's block scale: e4m3((block_amax / 6) * S_enc), saturating; NaN gives 0x7F.
TEQUANT_HD constexpr std::uint8_t nvfp4_rht_block_scale(float block_amax, float global_encode_scale) noexcept {
  return encode_e4m3(div_rn(block_amax, e2m1_max) * global_encode_scale);
}

/// The fused kernel's multiplier: 1 / (scale * S_dec), capped at FLT_MAX with NaN kept (a NaN scale
/// makes every code of its block NaN's +6).
TEQUANT_HD constexpr float nvfp4_rht_block_multiplier(std::uint8_t block_scale, float global_decode_scale) noexcept {
  const float m = div_rn(1.0f, decode_e4m3(block_scale) * global_decode_scale);
  return m > float_max ? float_max : m;
}

/// One block of 16 transformed values v: returns its scale code and writes its packed codes for stream
/// elements e0 .. e0 + 15 (byte (e0 + i) / 2 of `data`); stochastic from `rnd` when it is non-null.
TEQUANT_HD constexpr std::uint8_t nvfp4_rht_encode_block(const float* v, nvfp4_tensor_scales s, std::uint8_t* data,
                                                         std::uint64_t e0, nvfp4_random* rnd) noexcept {
  const std::uint8_t code = nvfp4_rht_block_scale(nan_propagating_amax(v, nvfp4_block), s.encode);
  nvfp4_encode_run(v, nvfp4_block, 1, nvfp4_rht_block_multiplier(code, s.decode), data, e0, rnd);
  return code;
}

/// The amax pass of one thread: max |y| (NaN ignored, -0 as +0, nvfp4_strided_amax's keys) of column k's
/// group mb (rows 16mb .. 16mb+15 of x [rows, cols]) after the transform. a.rows is a multiple of 16.
template <class T>
TEQUANT_HD inline float nvfp4_rht_group_amax(const nvfp4_cast_args& a, std::size_t k, std::size_t mb) noexcept {
  float y[hadamard_size] = {};
  nvfp4_rht_group(static_cast<const T*>(a.x) + mb * hadamard_size * a.cols + k, a.cols, y);
  return nvfp4_strided_amax(y, hadamard_size, 1);
}

/// The cast of one thread: columnwise block (k, mb) from the transform of column k's group mb, with
/// the transformed tensor's scales `s`. Writes its scale entry and its codes into the transposed data
/// (stream elements k*rows + m, the numbering of the untransformed columnwise copy).
template <class T>
TEQUANT_HD inline void nvfp4_rht_columnwise_block(const nvfp4_cast_args& a, nvfp4_tensor_scales s, std::size_t k,
                                                  std::size_t mb) noexcept {
  float y[hadamard_size] = {};
  nvfp4_rht_group(static_cast<const T*>(a.x) + mb * hadamard_size * a.cols + k, a.cols, y);
  nvfp4_random rnd(a.seed, a.col_first);
  a.col_scale[k * a.col_scale_cols + mb] =
      nvfp4_rht_encode_block(y, s, a.col_data, k * a.rows + mb * hadamard_size, a.stochastic ? &rnd : nullptr);
}

/// Undoes the transform of column k's group mb of a dequantized columnwise copy out [rows, cols] in
/// place: x_r = sum_c y_c M[r][c] in fp32 (hadamard_inverse_row).
TEQUANT_HD constexpr void nvfp4_rht_inverse_group(float* out, std::size_t cols, std::size_t k, std::size_t mb) noexcept {
  float* p = out + mb * hadamard_size * cols + k;
  float y[hadamard_size] = {};
  for (std::uint32_t c = 0; c < hadamard_size; ++c) y[c] = p[c * cols];
  for (std::uint32_t r = 0; r < hadamard_size; ++r) p[r * cols] = hadamard_inverse_row(y, r);
}

}  // namespace tequant::detail
