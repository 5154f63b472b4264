// SPDX-License-Identifier: Apache-2.0
// Host NVFP4 cast whose columnwise copy goes through TE's 16x16 random Hadamard transform
// (format/hadamard.hpp), and the inverse for its dequantize. The rowwise copy is the plain cast of
// host_nvfp4.hpp (its S_enc from the untransformed amax, as TE's pre-RHT amax). The columnwise copy
// follows TE's RHT-cast fusion kernel (hadamard_transform_cast_fusion.cu), the path TE takes for bf16:
// every 16 consecutive rows of a column transformed and rounded to bf16; S_enc from the amax of those
// values (NaN ignored, as the amax kernel's bf16 max); per block scale = e4m3((block_amax / 6) * S_enc)
// (the fused kernel divides, where the plain kernel multiplies by S_enc * (1/6)), with a NaN in the
// block propagating into its amax (cutlass's NaN-propagating absolute-max reduction) and so into the
// scale (0x7F) and the multiplier. The per-group transform and the per-block scale and codes are the
// __host__ __device__ functions of detail/nvfp4_rht_blocks.hpp, which the CUDA kernels run too; where
// the CPU has AVX2, eight columns are transformed at a time (a lane each, the same fp32 operations in
// the same order) and the round-to-nearest blocks are cast eight at a time, with the same results.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "tequant/backend/layouts.hpp"
#include "tequant/backend/validate.hpp"
#include "tequant/detail/host_kernels.hpp"
#include "tequant/detail/host_nvfp4.hpp"
#include "tequant/detail/host_simd.hpp"
#include "tequant/detail/nvfp4_rht_blocks.hpp"
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e2m1.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/hadamard.hpp"
#include "tequant/format/nvfp4.hpp"

namespace tequant::detail {

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
namespace avx2 {

/// to_bf16 then to_float of eight lanes: round to nearest even, NaN kept and made quiet.
TEQUANT_TARGET_AVX2_INLINE inline __m256 round_to_bf16_8(__m256 y) noexcept {
  const __m256i u = _mm256_castps_si256(y);
  const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), high);
  const __m256i quiet = _mm256_or_si256(_mm256_and_si256(u, high), _mm256_set1_epi32(0x00400000));
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
  return _mm256_castsi256_ps(_mm256_blendv_epi8(rounded, quiet, nan));
}

/// hadamard_column_fp32's signed sum in row order from +0 (rows R.. of output C), eight lanes at once;
/// each sign is known at compile time, so each step is one add or one subtract, as in the scalar loop.
template <std::uint32_t C, std::uint32_t R = 0>
TEQUANT_TARGET_AVX2_INLINE inline __m256 hadamard_sum8(const __m256* g, __m256 acc) noexcept {
  if constexpr (R == hadamard_size) {
    return acc;
  } else {
    acc = hadamard_negative(R, C) ? _mm256_sub_ps(acc, g[R]) : _mm256_add_ps(acc, g[R]);
    return hadamard_sum8<C, R + 1>(g, acc);
  }
}

template <std::uint32_t... C>
TEQUANT_TARGET_AVX2_INLINE inline void hadamard8(const __m256* g, __m256* y,
                                                 std::integer_sequence<std::uint32_t, C...>) noexcept {
  ((y[C] = round_to_bf16_8(_mm256_mul_ps(hadamard_sum8<C>(g, _mm256_setzero_ps()), _mm256_set1_ps(hadamard_scale)))),
   ...);
}

/// Rows i of eight vectors become columns: r[j] lane i <- r[i] lane j.
TEQUANT_TARGET_AVX2_INLINE inline void transpose8(__m256* r) noexcept {
  __m256 t[8], s[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // rows 0-3 (h = 0) and 4-7
    s[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], _MM_SHUFFLE(3, 2, 3, 2));
    s[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(1, 0, 1, 0));
    s[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(s[j], s[4 + j], 0x31);
  }
}

/// nvfp4_rht_group of the 16-row group x [16, K] (row stride K), eight columns at a time (a lane each,
/// the scalar function's operations in the same order), written transposed: column k's 16 values at
/// t + k * M. Returns the columns done (a multiple of 8).
template <class T>
TEQUANT_TARGET_AVX2 inline std::size_t nvfp4_rht_columns8(const T* x, std::size_t K, float* t, std::size_t M) noexcept {
  std::size_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 g[hadamard_size], y[hadamard_size];
    for (std::size_t r = 0; r < hadamard_size; ++r) g[r] = load8(x + r * K + k);
    hadamard8(g, y, std::make_integer_sequence<std::uint32_t, hadamard_size>{});
    transpose8(y);
    transpose8(y + 8);
    for (std::size_t j = 0; j < 8; ++j) {
      _mm256_storeu_ps(t + (k + j) * M, y[j]);
      _mm256_storeu_ps(t + (k + j) * M + 8, y[8 + j]);
    }
  }
  return k;
}

/// The round-to-nearest columnwise blocks of the transformed copy t [K, M] (nvfp4_rht_encode_block
/// without a random stream), eight blocks of a column at a time: their amaxes from the sign-cleared
/// bits (a NaN's exceed every number's, so a NaN in a block makes its amax NaN, as
/// nan_propagating_amax; any NaN gives the same scale 0x7F), scales by the FP8 encoder, multipliers
/// capped at FLT_MAX with NaN kept; the leftover blocks by nvfp4_rht_encode_block itself.
inline TEQUANT_TARGET_AVX2 void nvfp4_rht_encode_rn(const float* t, std::size_t M, std::size_t K, nvfp4_tensor_scales s,
                                                    std::uint8_t* data, std::uint8_t* scale, std::size_t scale_cols) noexcept {
  const __m256i magnitude = _mm256_set1_epi32(0x7FFFFFFF);
  const __m256 fp4_max = _mm256_set1_ps(e2m1_max), encode = _mm256_set1_ps(s.encode), decode = _mm256_set1_ps(s.decode);
  const __m256 cap = _mm256_set1_ps(float_max);
  const std::size_t MB = M / nvfp4_block;
  for (std::size_t k = 0; k < K; ++k) {
    std::size_t mb = 0;
    for (; mb + 8 <= MB; mb += 8) {
      const float* p = t + k * M + mb * nvfp4_block;
      __m256i keys[8];
      for (std::size_t j = 0; j < 8; ++j)
        keys[j] = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(p + 16 * j)), magnitude),
                                   _mm256_and_si256(_mm256_castps_si256(_mm256_loadu_ps(p + 16 * j + 8)), magnitude));
      const __m256 amax = _mm256_castsi256_ps(transpose_max8(keys));
      const __m256i codes = encode8<fp8_dtype::e4m3>(_mm256_mul_ps(_mm256_div_ps(amax, fp4_max), encode));
      const __m256 m = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(_mm256_i32gather_ps(e4m3_values.data(), codes, 4), decode));
      alignas(32) std::int32_t c[8];
      alignas(32) float mult[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(c), codes);
      _mm256_store_ps(mult, _mm256_blendv_ps(m, cap, _mm256_cmp_ps(m, cap, _CMP_GT_OQ)));
      for (std::size_t j = 0; j < 8; ++j) {
        scale[k * scale_cols + mb + j] = static_cast<std::uint8_t>(c[j]);
        nvfp4_encode16(p + 16 * j, _mm256_set1_ps(mult[j]), data + (k * M + (mb + j) * nvfp4_block) / 2);
      }
    }
    for (; mb < MB; ++mb) {
      const std::size_t e0 = k * M + mb * nvfp4_block;
      scale[k * scale_cols + mb] = nvfp4_rht_encode_block(t + e0, s, data, e0, nullptr);
    }
  }
}

}  // namespace avx2
#endif

/// x [M, K] transformed along its rows, transposed: t[k*M + m] (the columnwise layout), bf16-rounded
/// values widened to float. M is a multiple of 16.
template <class T>
std::unique_ptr<float[]> nvfp4_rht_columns(matrix_view<const T> x) {
  const std::size_t M = x.rows, K = x.cols;
  std::unique_ptr<float[]> t(new float[M * K]);  // every element is written below: no zero fill
  for (std::size_t r0 = 0; r0 < M; r0 += hadamard_size) {
    std::size_t k = 0;
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
    if constexpr (avx2::input<T>)
      if (host_has_avx2()) k = avx2::nvfp4_rht_columns8(x.data + r0 * K, K, t.get() + r0, M);
#endif
    for (; k < K; ++k) nvfp4_rht_group(x.data + r0 * K + k, K, t.get() + k * M + r0);
  }
  return t;
}

/// The columnwise copy with the transform. Stochastic when `sr`: element e = k*M + m draws word e of
/// the stream (seed, first_group), the numbering of the untransformed columnwise copy.
template <class T>
void quantize_nvfp4_columnwise_rht_host(matrix_view<const T> x, const nvfp4_output& o, scale_shape cs, bool sr,
                                        std::uint64_t seed, std::uint64_t first_group) {
  const std::size_t M = x.rows, K = x.cols;
  const std::unique_ptr<float[]> t = nvfp4_rht_columns(x);
  const nvfp4_tensor_scales s = nvfp4_scales_from_amax(amax_host(t.get(), M * K));
  std::memset(o.columnwise_scale.data(), 0, o.columnwise_scale.size());
  o.columnwise_global_scale_inv[0] = s.decode;
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (!sr && host_has_avx2())
    return avx2::nvfp4_rht_encode_rn(t.get(), M, K, s, o.columnwise_data.data(), o.columnwise_scale.data(), cs.cols);
#endif
  nvfp4_random rnd(seed, first_group);
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t mb = 0; mb < M / nvfp4_block; ++mb) {
      const std::size_t e0 = k * M + mb * nvfp4_block;
      o.columnwise_scale[k * cs.cols + mb] =
          nvfp4_rht_encode_block(t.get() + e0, s, o.columnwise_data.data(), e0, sr ? &rnd : nullptr);
    }
}

/// quantize_nvfp4_host with the columnwise copy transformed: the rowwise copy as without the transform,
/// then the columnwise one from the stream position right after the rowwise stream, as untransformed.
template <class T>
void quantize_nvfp4_rht_host(matrix_view<const T> x, const nvfp4_options& opt, const nvfp4_output& o, bool row, bool col,
                             scale_shape rs, scale_shape cs) {
  if (col) check_nvfp4_rht("quantize_nvfp4", x.rows, opt.tile_2d);
  const bool sr = opt.rng_offset != nullptr;
  const std::uint64_t first = sr ? *opt.rng_offset : 0, groups = nvfp4_groups(x.rows * x.cols);
  if (row) quantize_nvfp4_host(x, opt, o, true, false, rs, cs);  // advances *rng_offset by `groups`
  if (col) quantize_nvfp4_columnwise_rht_host(x, o, cs, sr, opt.rng_seed, first + groups);
  if (sr) *opt.rng_offset = first + (col ? 2 * groups : groups);  // past the last group drawn, as without
}

}  // namespace tequant::detail
