// SPDX-License-Identifier: Apache-2.0
// The host quantize kernels' entry points, declared without their bodies. host_backend calls only these.
// Their definitions (detail/host_simd.hpp, host_nvfp4.hpp, host_nvfp4_rht.hpp: AVX2 code, <immintrin.h>)
// are what a translation unit pays most for in parse and code generation, so a program may compile them
// once:
// define TEQUANT_SEPARATE_HOST_KERNELS in every translation unit and include
// <tequant/backend/host_kernels_instantiate.hpp> in exactly one (docs/api.md, "Headers and macros").
#pragma once
#include <cstddef>
#include <cstdint>

#include "tequant/backend/layouts.hpp"
#include "tequant/backend/validate.hpp"
#include "tequant/detail/nvfp4_rht_blocks.hpp"
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e2m1.hpp"
#include "tequant/format/e8m0.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/hadamard.hpp"
#include "tequant/format/nvfp4.hpp"

namespace tequant::detail {

/// MXFP8 E8M0 code of a block whose amax key is `key`: the code of amax / fp8_max.
template <fp8_dtype D>
inline std::uint8_t mxfp8_code(std::uint32_t key) noexcept {
  constexpr float rcp = 1.0f / fp8_max(D);  // TE multiplies by the fp32 reciprocal
  return encode_e8m0(bits_float(key) * rcp);
}

/// Outputs of at least this many bytes are written with streaming stores by the AVX2 kernels: well
/// past the per-core share of a last-level cache, where a consumer would not find them in cache anyway.
/// The matrix kernels below are called a row block at a time; their `stream` argument says whether the
/// whole output is this large (they stream only when their destination is also 16-byte aligned).
inline constexpr std::size_t streaming_store_min_bytes = std::size_t{4} << 20;

// Not `inline`: in the separate mode a translation unit sees these declarations only and links to the
// one explicit instantiation of each (backend/host_kernels_instantiate.hpp).

/// max over |x| of the non-NaN values (>= 0).
template <class T>
float amax_host(const T* x, std::size_t n) noexcept;

/// out[i] = fp8(x[i] * scale); when `amax_bits` is non-null, also max-accumulates amax keys of x
/// (one read of x for delayed scaling's cast + amax).
template <fp8_dtype D, class T>
void scale_encode_host(const T* x, std::size_t n, float scale, std::uint8_t* out, std::uint32_t* amax_bits) noexcept;

/// out[i] = fp8(x[i] * scale[i]) (per-element multipliers: columnwise blocks).
template <fp8_dtype D, class T>
void scale_encode_each_host(const T* x, std::size_t n, const float* scale, std::uint8_t* out) noexcept;

/// colmax[k] = max(colmax[k], amax key of x[k]) for one row (columnwise block amax).
template <class T>
void column_amax_host(const T* x, std::size_t n, std::uint32_t* colmax) noexcept;

/// MXFP8 1x32 rowwise blocks of x [M, K] (K a multiple of 32): data [M, K], E8M0 codes at
/// scale[m * scale_cols + k / 32].
template <fp8_dtype D, class T>
void mxfp8_rowwise_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                        std::size_t scale_cols, bool stream) noexcept;

/// MXFP8 32x1 columnwise blocks of x [M, K] (M and K multiples of 32): data [M, K], the E8M0 codes of
/// rows [32 mb, 32 mb + 32) at scale[mb * scale_cols + k].
template <fp8_dtype D, class T>
void mxfp8_columnwise_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                           std::size_t scale_cols, bool stream) noexcept;

/// FP8 block scaling 1x128 rowwise tiles of x [M, K].
template <fp8_dtype D, class T>
void block_rowwise_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale_inv,
                        std::size_t scale_stride, bool pow2, float eps, float value_for_inf, bool stream) noexcept;

/// FP8 block scaling 128x128 tiles of x [M, K] in row blocks of 128 rows (the last row block partial
/// when M % 128 != 0, the last tile of a row partial when K % 128 != 0): scale[mb * KB + kb] (KB =
/// ceil(K / 128)) = scale_from_amax(amax of tile (mb, kb), ...), and, when data is non-null, data
/// [M, K] = the codes of every tile cast with its scale.
template <fp8_dtype D, class T>
void block_2d_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale, bool pow2, float eps,
                   float value_for_inf, bool stream) noexcept;

/// NVFP4: quantizes x [M, K] (M, K even; checked by the caller) into the requested directions of `o`.
template <class T>
void quantize_nvfp4_host(matrix_view<const T> x, const nvfp4_options& opt, const nvfp4_output& o, bool row, bool col,
                         scale_shape rs, scale_shape cs);

/// NVFP4 with the random Hadamard transform of the columnwise copy (detail/host_nvfp4_rht.hpp).
template <class T>
void quantize_nvfp4_rht_host(matrix_view<const T> x, const nvfp4_options& opt, const nvfp4_output& o, bool row, bool col,
                             scale_shape rs, scale_shape cs);

/// Undoes the transform of a dequantized columnwise copy out [M, K] in place: each column's 16-row
/// groups times M^T, in fp32 (the CUDA inverse kernel's per-thread function, nvfp4_rht_inverse_group).
inline void nvfp4_inverse_rht_host(float* out, std::size_t M, std::size_t K) noexcept {
  for (std::size_t mb = 0; mb < M / hadamard_size; ++mb)
    for (std::size_t k = 0; k < K; ++k) nvfp4_rht_inverse_group(out, K, k, mb);
}

/// Code `e` of packed E2M1 data (two a byte, the lower nibble first).
inline std::uint8_t get_nibble(const std::uint8_t* data, std::size_t e) noexcept {
  return static_cast<std::uint8_t>((data[e / 2] >> ((e & 1) * 4)) & 0x0Fu);
}

/// NVFP4: decodes one direction: out [M, K] = e2m1 * e4m3 block scale * global decode scale.
inline void dequantize_nvfp4_host(const std::uint8_t* q, std::size_t M, std::size_t K, bool columnwise,
                                  const std::uint8_t* scale, scale_shape ss, float global_inv, float* out) noexcept {
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t k = 0; k < K; ++k) {
      const std::size_t e = columnwise ? k * M + m : m * K + k;
      const std::uint8_t s = columnwise ? scale[k * ss.cols + m / nvfp4_block] : scale[m * ss.cols + k / nvfp4_block];
      out[m * K + k] = decode_e2m1(get_nibble(q, e)) * decode_e4m3(s) * global_inv;
    }
}

}  // namespace tequant::detail
