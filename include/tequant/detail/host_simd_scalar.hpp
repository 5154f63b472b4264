// SPDX-License-Identifier: Apache-2.0
// The portable host inner loops (every target; the tails and fallbacks of the vector kernels):
// bit-exact with format/fp8.hpp. Their amax is an integer max over sign-cleared bit patterns with
// NaN mapped to 0, which clang vectorises and which needs no finite-math flags.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tequant/config.hpp"
#include "tequant/detail/host_kernels.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e8m0.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/half.hpp"
#include "tequant/format/scale.hpp"

namespace tequant::detail {

/// Widening load of one element (exact for every input type).
template <class T>
inline float widen(const T& v) noexcept { return to_float(v); }

/// Sign-cleared bit pattern, NaN -> 0: an unsigned max of these is the bits of fmax(0, |x|...).
inline std::uint32_t amax_key(float f) noexcept {
  const std::uint32_t a = float_bits(f) & 0x7FFFFFFFu;
  return a > 0x7F800000u ? 0u : a;
}

/// Per-format constants of the branch-free encoder.
template <fp8_dtype D>
struct fp8_traits;
template <>
struct fp8_traits<fp8_dtype::e4m3> {
  static constexpr int mant = 3, bias = 7;
  static constexpr std::uint32_t max_code = 0x7E;
  static constexpr std::uint8_t (*encode)(float) noexcept = &encode_e4m3;
};
template <>
struct fp8_traits<fp8_dtype::e5m2> {
  static constexpr int mant = 2, bias = 15;
  static constexpr std::uint32_t max_code = 0x7B;
  static constexpr std::uint8_t (*encode)(float) noexcept = &encode_e5m2;
};

// ---- portable loops (every target; the tails of the vector loops) ---------------------------------

template <class T>
inline std::uint32_t amax_bits_scalar(const T* x, std::size_t n) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t k = amax_key(widen(x[i]));
    m = k > m ? k : m;
  }
  return m;
}

/// out[i] = fp8(x[i] * scale); returns the max amax key of x when `with_amax` (else 0).
template <fp8_dtype D, class T>
inline std::uint32_t scale_encode_scalar(const T* x, std::size_t n, float scale, std::uint8_t* out, bool with_amax) noexcept {
  std::uint32_t m = 0;
  for (std::size_t t = 0; t < n; ++t) {
    const float v = widen(x[t]);
    if (with_amax) {
      const std::uint32_t k = amax_key(v);
      m = k > m ? k : m;
    }
    out[t] = fp8_traits<D>::encode(v * scale);
  }
  return m;
}

template <fp8_dtype D, class T>
inline void scale_encode_each_scalar(const T* x, std::size_t n, const float* scale, std::uint8_t* out) noexcept {
  for (std::size_t t = 0; t < n; ++t) out[t] = fp8_traits<D>::encode(widen(x[t]) * scale[t]);
}

template <class T>
inline void column_amax_scalar(const T* x, std::size_t n, std::uint32_t* colmax) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t k = amax_key(widen(x[i]));
    colmax[i] = k > colmax[i] ? k : colmax[i];
  }
}

/// MXFP8 rowwise quantization of one 1x32 block: E8M0 code of amax / fp8_max, then the cast.
template <fp8_dtype D, class T>
inline std::uint8_t mxfp8_block_scalar(const T* src, std::uint8_t* dst) noexcept {
  const std::uint8_t e = mxfp8_code<D>(amax_bits_scalar(src, 32));
  scale_encode_scalar<D>(src, 32, e8m0_cast_multiplier(e), dst, false);
  return e;
}

/// Rows [0, M) of x [M, K] (K a multiple of 32) in 1x32 blocks: data [M, K], E8M0 codes at
/// scale[m * scale_cols + k / 32].
template <fp8_dtype D, class T>
inline void mxfp8_rowwise_scalar(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                                 std::size_t scale_cols) noexcept {
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t kb = 0; kb < K / 32; ++kb)
      scale[m * scale_cols + kb] = mxfp8_block_scalar<D>(x + m * K + kb * 32, data + m * K + kb * 32);
}

/// Columns [0, K) of one 32-row block of x [*, K] (K a multiple of 32) in 32x1 blocks: data [32, K],
/// E8M0 codes at scale[k]. Works on 32 columns at a time so that the block of 32x32 values read for the
/// column amaxes is still in L1 when it is cast (a full row block of K columns is not).
template <fp8_dtype D, class T>
inline void mxfp8_columnwise_scalar(const T* x, std::size_t K, std::uint8_t* data, std::uint8_t* scale) noexcept {
  for (std::size_t c0 = 0; c0 < K; c0 += 32) {
    std::uint32_t colmax[32] = {};
    for (std::size_t r = 0; r < 32; ++r) column_amax_scalar(x + r * K + c0, 32, colmax);
    float mult[32];
    for (std::size_t c = 0; c < 32; ++c) {
      const std::uint8_t e = mxfp8_code<D>(colmax[c]);
      scale[c0 + c] = e;
      mult[c] = e8m0_cast_multiplier(e);
    }
    for (std::size_t r = 0; r < 32; ++r) scale_encode_each_scalar<D>(x + r * K + c0, 32, mult, data + r * K + c0);
  }
}

/// mxfp8_columnwise_scalar of each 32-row block of x [M, K] (M a multiple of 32): the E8M0 codes of
/// rows [32 mb, 32 mb + 32) at scale[mb * scale_cols + k].
template <fp8_dtype D, class T>
inline void mxfp8_columnwise_scalar(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                                    std::size_t scale_cols) noexcept {
  for (std::size_t m0 = 0; m0 < M; m0 += 32) mxfp8_columnwise_scalar<D>(x + m0 * K, K, data + m0 * K, scale + m0 / 32 * scale_cols);
}

/// FP8 block scaling of one 1xlen tile (len <= 128): scale_from_amax, cast; returns the scale.
template <fp8_dtype D, class T>
inline float block_tile_scalar(const T* src, std::size_t len, std::uint8_t* dst, bool pow2, float eps,
                               float value_for_inf) noexcept {
  const float s = scale_from_amax(bits_float(amax_bits_scalar(src, len)), fp8_max(D), pow2, eps, value_for_inf);
  scale_encode_scalar<D>(src, len, s, dst, false);
  return s;
}

/// Rows [0, M) of x [M, K] in 1x128 tiles (the last one partial): data [M, K], scale_inv (1/scale) of
/// row m, tile kb at scale_inv[kb * scale_stride + m] (TE's transposed 1x128 scale layout).
template <fp8_dtype D, class T>
inline void block_rowwise_scalar(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale_inv,
                                 std::size_t scale_stride, bool pow2, float eps, float value_for_inf) noexcept {
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t c0 = 0; c0 < K; c0 += 128) {
      const std::size_t len = K - c0 < 128 ? K - c0 : 128;
      const float s = block_tile_scalar<D>(x + m * K + c0, len, data + m * K + c0, pow2, eps, value_for_inf);
      scale_inv[(c0 / 128) * scale_stride + m] = 1.0f / s;
    }
}

/// FP8 block scaling 128x128 tiles of x [M, K] in row blocks of 128 (the last partial when M % 128 != 0):
/// scale[mb * KB + kb] (KB = ceil(K / 128)) of each tile, and the cast of the tile with it into data
/// [M, K] when data is non-null.
template <fp8_dtype D, class T>
inline void block_2d_scalar(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale, bool pow2, float eps,
                            float value_for_inf) noexcept {
  const std::size_t KB = (K + 127) / 128;
  for (std::size_t r0 = 0; r0 < M; r0 += 128) {
    const std::size_t nr = M - r0 < 128 ? M - r0 : 128;
    for (std::size_t c0 = 0; c0 < K; c0 += 128) {
      const std::size_t len = K - c0 < 128 ? K - c0 : 128;
      std::uint32_t m = 0;
      for (std::size_t r = r0; r < r0 + nr; ++r) {
        const std::uint32_t k = amax_bits_scalar(x + r * K + c0, len);
        m = k > m ? k : m;
      }
      const float s = scale_from_amax(bits_float(m), fp8_max(D), pow2, eps, value_for_inf);
      scale[r0 / 128 * KB + c0 / 128] = s;
      if (data)
        for (std::size_t r = r0; r < r0 + nr; ++r) scale_encode_scalar<D>(x + r * K + c0, len, s, data + r * K + c0, false);
    }
  }
}

}  // namespace tequant::detail
