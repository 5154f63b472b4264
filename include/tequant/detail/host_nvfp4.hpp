// SPDX-License-Identifier: Apache-2.0
// Host NVFP4 quantize and dequantize (fp32, bf16 and fp16 input): TE's rule (format/nvfp4.hpp) with TE's
// scale layouts. Two passes like current scaling: the tensor's amax, then the cast. Full blocks run AVX2
// kernels where the CPU has them (chosen at run time like host_simd.hpp's kernels): rowwise, columnwise
// and 2D tiles, except stochastic rounding with 2D tiles; that, partial blocks and every other target
// run the portable loops, which produce the same bits.
#pragma once
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tequant/backend/layouts.hpp"
#include "tequant/detail/host_simd.hpp"
#include "tequant/detail/nvfp4_blocks.hpp"
#include "tequant/detail/philox.hpp"
#include "tequant/detail/philox_x8.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e2m1.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/nvfp4.hpp"

namespace tequant::detail {

/// nvfp4_random on the host: the random word of element `e` of a stochastic-rounding stream (seed, first
/// group), drawn eight groups at a time (AVX2 lanes where the CPU has them; the same words as
/// philox_group) and cached, so a sequential walk runs the generator once per 32 elements.
class nvfp4_host_random {
 public:
  nvfp4_host_random(std::uint64_t seed, std::uint64_t first_group) noexcept : seed_(seed), first_(first_group) {}
  std::uint32_t operator()(std::uint64_t e) noexcept {
    const std::uint64_t g = e / 4;
    if (!drawn_ || g - group_ >= 8) {  // (g < group_ wraps around to a large difference)
      words_ = philox_groups8(seed_, first_, g);
      group_ = g;
      drawn_ = true;
    }
    return words_.w[e % 4][g - group_];
  }

 private:
  std::uint64_t seed_, first_;
  std::uint64_t group_ = 0;
  bool drawn_ = false;
  philox_lanes8 words_{};
};

/// out[i] = the random word of element e0 + i of a stream (seed, first group), for i < n, in element order.
inline void nvfp4_random_words(std::uint64_t seed, std::uint64_t first, std::uint64_t e0, std::size_t n,
                               std::uint32_t* out) noexcept {
  std::uint64_t g = e0 / 4;
  std::size_t t = static_cast<std::size_t>(e0 % 4), done = 0;
  for (; done < n; g += 8, t = 0) {
    const philox_lanes8 w = philox_groups8(seed, first, g);
    for (; t < 32 && done < n; ++t) out[done++] = w.w[t % 4][t / 4];
  }
}

/// The round-to-nearest codes of elements [0, len) of one block (len even) multiplied by mult, packed
/// two a byte (the portable loop; a partial block).
template <class T>
inline void nvfp4_block_rn_scalar(const T* x, std::size_t len, float mult, std::uint8_t* data) noexcept {
  for (std::size_t i = 0; i < len; i += 2)
    data[i / 2] = static_cast<std::uint8_t>(encode_e2m1(widen(x[i]) * mult) | (encode_e2m1(widen(x[i + 1]) * mult) << 4));
}

/// The stochastic rowwise codes of elements [0, len) of one block (the portable loop; a partial block).
template <class T>
inline void nvfp4_block_sr_scalar(const T* x, std::size_t len, float mult, const std::uint32_t* words,
                                  std::uint8_t* data) noexcept {
  for (std::size_t i = 0; i < len; i += 2)
    data[i / 2] = static_cast<std::uint8_t>(encode_e2m1_stochastic(widen(x[i]) * mult, words[i]) |
                                            (encode_e2m1_stochastic(widen(x[i + 1]) * mult, words[i + 1]) << 4));
}

/// Writes code c (low nibble) for element e of a packed code array.
inline void put_nibble(std::uint8_t* data, std::size_t e, std::uint8_t c) noexcept {
  std::uint8_t& b = data[e / 2];
  b = (e & 1) != 0 ? static_cast<std::uint8_t>((b & 0x0Fu) | (c << 4)) : static_cast<std::uint8_t>((b & 0xF0u) | c);
}

template <class T>
inline float nvfp4_block_amax(const T* x, std::size_t n, std::size_t stride) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t k = amax_key(widen(x[i * stride]));
    m = k > m ? k : m;
  }
  return bits_float(m);
}

/// Rowwise blocks of one row, round to nearest: codes and block scales (the portable loop).
template <class T>
inline void nvfp4_row_rn_scalar(const T* x, std::size_t K, float s_enc, float s_dec, std::uint8_t* data,
                                std::uint8_t* scale) noexcept {
  for (std::size_t c0 = 0, b = 0; c0 < K; c0 += nvfp4_block, ++b) {
    const std::size_t len = std::min<std::size_t>(nvfp4_block, K - c0);
    const std::uint8_t code = nvfp4_block_scale(nvfp4_block_amax(x + c0, len, 1), s_enc);
    scale[b] = code;
    nvfp4_block_rn_scalar(x + c0, len, nvfp4_block_multiplier(code, s_dec), data + c0 / 2);
  }
}

/// Rowwise blocks of one row, rounded stochastically with words[k] for element k (the portable loop).
template <class T>
inline void nvfp4_row_sr_scalar(const T* x, std::size_t K, float s_enc, float s_dec, const std::uint32_t* words,
                                std::uint8_t* data, std::uint8_t* scale) noexcept {
  for (std::size_t c0 = 0, b = 0; c0 < K; c0 += nvfp4_block, ++b) {
    const std::size_t len = std::min<std::size_t>(nvfp4_block, K - c0);
    const std::uint8_t code = nvfp4_block_scale(nvfp4_block_amax(x + c0, len, 1), s_enc);
    scale[b] = code;
    nvfp4_block_sr_scalar(x + c0, len, nvfp4_block_multiplier(code, s_dec), words + c0, data + c0 / 2);
  }
}

/// Where a columnwise kernel writes one 16-row block: the codes of column k at data + k * data_stride
/// (8 bytes), its E4M3 block scale at scale[k * scale_stride].
struct nvfp4_column_block_out {
  std::uint8_t* data;
  std::size_t data_stride;
  std::uint8_t* scale;
  std::size_t scale_stride;
};

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
namespace avx2 {

/// E2M1 codes of eight floats (low 4 bits of each lane), as the scalar encoder: RNE, saturating to +-6,
/// NaN -> +6. The FPU rounds, as encode8 does for FP8: |y| clamped to 6, plus c = 2^(E + 22) (E = the
/// exponent of |y|, at least 0, E2M1's smallest normal exponent) is a float whose ulp is the E2M1 step
/// at |y|; bits(sum) - bits(c) counts steps above 2^E, and the code is that plus 2E (12 vector
/// operations; the threshold count this replaces took 21). Checked against the scalar encoder on all
/// 2^32 inputs (tests/format, label exhaustive).
TEQUANT_TARGET_AVX2_INLINE inline __m256i encode_e2m1_8(__m256 y) noexcept {
  const __m256i u = _mm256_castps_si256(y);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256 mag = _mm256_min_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(e2m1_max));  // NaN: fixed below
  const __m256i e = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(mag), _mm256_set1_epi32(0x7F800000)),
                                     _mm256_set1_epi32(127 << 23));
  const __m256i c = _mm256_add_epi32(e, _mm256_set1_epi32(22 << 23));
  const __m256i steps = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(mag, _mm256_castsi256_ps(c))), c);
  const __m256i base = _mm256_sub_epi32(_mm256_srli_epi32(e, 22), _mm256_set1_epi32(127 << 1));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 28), _mm256_set1_epi32(0x8));
  const __m256i code = _mm256_or_si256(_mm256_add_epi32(steps, base), sign);
  const __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7), is_nan);
}

/// Packs 16 code lanes (elements 0-7 in c0, 8-15 in c1) into 8 bytes, element 2i in the low nibble.
TEQUANT_TARGET_AVX2_INLINE inline std::uint64_t pack16(__m256i c0, __m256i c1) noexcept {
  // Each 64-bit lane holds (even, odd): even | odd << 4 lands in its low byte.
  const __m256i p0 = _mm256_or_si256(c0, _mm256_srli_epi64(c0, 28));
  const __m256i p1 = _mm256_or_si256(c1, _mm256_srli_epi64(c1, 28));
  // Low byte of each 64-bit lane: the low 128-bit half's two to bytes 0-1, the high half's to bytes 2-3.
  const __m256i pick = _mm256_setr_epi8(0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,  //
                                        -1, -1, 0, 8, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  const __m256i b0 = _mm256_shuffle_epi8(p0, pick), b1 = _mm256_shuffle_epi8(p1, pick);
  const __m128i w0 = _mm_or_si128(_mm256_castsi256_si128(b0), _mm256_extracti128_si256(b0, 1));
  const __m128i w1 = _mm_or_si128(_mm256_castsi256_si128(b1), _mm256_extracti128_si256(b1, 1));
  return static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm_cvtsi128_si32(w0))) |
         static_cast<std::uint64_t>(static_cast<std::uint32_t>(_mm_cvtsi128_si32(w1))) << 32;
}

/// Max |x| of 16 elements, NaN ignored (as float).
template <class T>
TEQUANT_TARGET_AVX2_INLINE inline float block16_amax(__m256 v0, __m256 v1) noexcept {
  const __m256i k = _mm256_max_epu32(amax_key8(v0), amax_key8(v1));
  return bits_float(hmax_epi32(k));
}

/// E4M3 code -> value for the codes a block scale can take (0..126; 127 is NaN and never produced).
inline constexpr auto e4m3_values = [] {
  std::array<float, 128> t{};
  for (unsigned c = 0; c < 128; ++c) t[c] = decode_e4m3(static_cast<std::uint8_t>(c));
  return t;
}();

/// Codes of 16 elements scaled by m, packed, stored at out (8 bytes).
template <class T>
TEQUANT_TARGET_AVX2_INLINE inline void nvfp4_encode16(const T* p, __m256 m, std::uint8_t* out) noexcept {
  const std::uint64_t packed =
      pack16(encode_e2m1_8(_mm256_mul_ps(load8(p), m)), encode_e2m1_8(_mm256_mul_ps(load8(p + 8), m)));
  std::memcpy(out, &packed, sizeof packed);
}

/// encode_e2m1_stochastic of eight floats with their random words, the scalar encoder's operations:
/// lo by comparisons against the magnitudes, frac by one subtraction and one division, the draw by an
/// exact conversion of the top 24 bits; saturation to +-6 and NaN -> +6 last.
TEQUANT_TARGET_AVX2_INLINE inline __m256i encode_e2m1_sr8(__m256 y, __m256i random) noexcept {
  const __m256i u = _mm256_castps_si256(y);
  const __m256i a_bits = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256 a = _mm256_castsi256_ps(a_bits);
  const __m256 magnitude = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
  __m256i neg_lo = _mm256_setzero_si256();  // each magnitude at or below a adds a -1 lane
  for (const float t : {0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f})
    neg_lo = _mm256_add_epi32(neg_lo, _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(t), _CMP_GE_OQ)));
  const __m256i lo = _mm256_sub_epi32(_mm256_setzero_si256(), neg_lo);
  const __m256 below = _mm256_permutevar8x32_ps(magnitude, lo);
  const __m256 above = _mm256_permutevar8x32_ps(magnitude, _mm256_add_epi32(lo, _mm256_set1_epi32(1)));
  const __m256 frac = _mm256_div_ps(_mm256_sub_ps(a, below), _mm256_sub_ps(above, below));
  const __m256 draw = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_srli_epi32(random, 8)), _mm256_set1_ps(0x1p-24f));
  const __m256i up = _mm256_castps_si256(_mm256_cmp_ps(draw, frac, _CMP_LT_OQ));  // -1 where rounding up
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 28), _mm256_set1_epi32(0x8));
  __m256i code = _mm256_or_si256(_mm256_sub_epi32(lo, up), sign);
  const __m256i saturated = _mm256_castps_si256(_mm256_cmp_ps(a, _mm256_set1_ps(e2m1_max), _CMP_GE_OQ));
  code = _mm256_blendv_epi8(code, _mm256_or_si256(sign, _mm256_set1_epi32(0x7)), saturated);
  const __m256i is_nan = _mm256_cmpgt_epi32(a_bits, _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7), is_nan);
}

/// E4M3 block scales (codes) and multipliers of eight block amaxes: nvfp4_block_scale and
/// nvfp4_block_multiplier, the same operations in eight lanes (block_factor = S_enc * (1/6), dec = S_dec).
TEQUANT_TARGET_AVX2_INLINE inline void nvfp4_block_scales8(__m256 block_amax, __m256 block_factor, __m256 dec,
                                                     std::int32_t* codes, float* mult) noexcept {
  const __m256i c = encode8<fp8_dtype::e4m3>(_mm256_mul_ps(block_amax, block_factor));
  const __m256 scales = _mm256_i32gather_ps(e4m3_values.data(), c, 4);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), c);
  _mm256_storeu_ps(mult, _mm256_min_ps(_mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(scales, dec)),
                                       _mm256_set1_ps(float_max)));  // 1 / 0 = inf -> FLT_MAX
}

/// How nvfp4_columns16 encodes: to nearest, or stochastically with the column stream's words.
struct nvfp4_columns_rn {
  void columns(std::size_t) noexcept {}
  TEQUANT_TARGET_AVX2_INLINE __m256i operator()(__m256 y, std::size_t) const noexcept { return encode_e2m1_8(y); }
};
/// Words of elements k*M + r0 + i (column k, row r0 + i) of a stream (seed, first group), drawn for
/// eight columns of one 16-row block at a time.
struct nvfp4_columns_sr {
  std::uint64_t seed, first;
  std::size_t M, r0;
  alignas(32) std::uint32_t words[8 * 16]{};  // words[c * 16 + i]: column k + c, row r0 + i
  void columns(std::size_t k) noexcept {
    for (std::size_t c = 0; c < 8; ++c) nvfp4_random_words(seed, first, (k + c) * M + r0, 16, words + c * 16);
  }
  TEQUANT_TARGET_AVX2_INLINE __m256i operator()(__m256 y, std::size_t i) const noexcept {
    const __m256i at = _mm256_add_epi32(_mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112),
                                        _mm256_set1_epi32(static_cast<int>(i)));
    return encode_e2m1_sr8(y, _mm256_i32gather_epi32(reinterpret_cast<const int*>(words), at, 4));
  }
};

/// Columnwise 16x1 blocks of one full block of 16 rows x [16, K] (row stride K), eight columns (eight
/// blocks, a lane each) at a time: the block amaxes (NaN ignored), scales and multipliers as
/// nvfp4_block_scales8, then each column's 16 codes (by `encode`) packed two a byte in row order (even rows in
/// the low nibble), the same operations as the portable loops. With `tile_mult` (2D tiles) column k's
/// scale is already chosen and its multiplier is tile_mult[k]. Returns the columns done (a multiple of 8).
template <class T, class Encode>
TEQUANT_TARGET_AVX2 inline std::size_t nvfp4_columns16(const T* x, std::size_t K, float s_enc, float s_dec,
                                                       const float* tile_mult, nvfp4_column_block_out o,
                                                       Encode& encode) noexcept {
  const __m256 block_factor = _mm256_set1_ps(s_enc * (1.0f / e2m1_max));
  const __m256 dec = _mm256_set1_ps(s_dec);
  std::size_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 m;
    if (tile_mult != nullptr) {
      m = _mm256_loadu_ps(tile_mult + k);
    } else {
      __m256i key = amax_key8(load8(x + k));
      for (std::size_t r = 1; r < nvfp4_block; ++r) key = _mm256_max_epi32(key, amax_key8(load8(x + r * K + k)));
      alignas(32) std::int32_t code[8];
      alignas(32) float mult[8];
      nvfp4_block_scales8(_mm256_castsi256_ps(key), block_factor, dec, code, mult);
      for (std::size_t c = 0; c < 8; ++c) o.scale[(k + c) * o.scale_stride] = static_cast<std::uint8_t>(code[c]);
      m = _mm256_load_ps(mult);
    }
    encode.columns(k);
    __m256i half[2];  // byte j of lane c: rows 8h + 2j (low nibble) and 8h + 2j + 1 of column k + c
    for (std::size_t h = 0; h < 2; ++h) {
      __m256i w = _mm256_setzero_si256();
      for (std::size_t j = 0; j < 4; ++j) {
        const std::size_t r = 8 * h + 2 * j;
        const __m256i lo = encode(_mm256_mul_ps(load8(x + r * K + k), m), r);
        const __m256i hi = encode(_mm256_mul_ps(load8(x + (r + 1) * K + k), m), r + 1);
        w = _mm256_or_si256(w, _mm256_sll_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)),
                                                _mm_cvtsi32_si128(static_cast<int>(8 * j))));
      }
      half[h] = w;
    }
    // Column c's 8 bytes are lane c of half[0] then of half[1]: interleaving them makes 64-bit columns.
    alignas(32) std::uint64_t q[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(q), _mm256_unpacklo_epi32(half[0], half[1]));     // 0 1 4 5
    _mm256_store_si256(reinterpret_cast<__m256i*>(q + 4), _mm256_unpackhi_epi32(half[0], half[1]));  // 2 3 6 7
    constexpr std::size_t column[8] = {0, 1, 4, 5, 2, 3, 6, 7};
    for (std::size_t i = 0; i < 8; ++i) std::memcpy(o.data + (k + column[i]) * o.data_stride, &q[i], sizeof q[i]);
  }
  return k;
}

/// The full blocks of one row, round to nearest, block b multiplied by mult[b]; returns the blocks done.
template <class T>
TEQUANT_TARGET_AVX2 inline std::size_t nvfp4_row_given_scales(const T* x, std::size_t K, const float* mult,
                                                               std::uint8_t* data) noexcept {
  const std::size_t full = K / nvfp4_block;
  for (std::size_t b = 0; b < full; ++b)
    nvfp4_encode16(x + b * nvfp4_block, _mm256_set1_ps(mult[b]), data + b * (nvfp4_block / 2));
  return full;
}

/// How nvfp4_row encodes a block: to nearest, or stochastically with the row's random words (element
/// order, words[k] for element k of the row).
struct nvfp4_encode_rn {
  template <class T>
  TEQUANT_TARGET_AVX2_INLINE void operator()(const T* p, __m256 m, std::size_t, std::uint8_t* out) const noexcept {
    nvfp4_encode16(p, m, out);
  }
  template <class T>
  void tail(const T* p, std::size_t len, float mult, std::size_t, std::uint8_t* out) const noexcept {
    nvfp4_block_rn_scalar(p, len, mult, out);
  }
};
struct nvfp4_encode_sr {
  const std::uint32_t* words;
  template <class T>
  TEQUANT_TARGET_AVX2_INLINE void operator()(const T* p, __m256 m, std::size_t k, std::uint8_t* out) const noexcept {
    const __m256i r0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + k));
    const __m256i r1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words + k + 8));
    const std::uint64_t packed = pack16(encode_e2m1_sr8(_mm256_mul_ps(load8(p), m), r0),
                                        encode_e2m1_sr8(_mm256_mul_ps(load8(p + 8), m), r1));
    std::memcpy(out, &packed, sizeof packed);
  }
  template <class T>
  void tail(const T* p, std::size_t len, float mult, std::size_t k, std::uint8_t* out) const noexcept {
    nvfp4_block_sr_scalar(p, len, mult, words + k, out);
  }
};

/// The rowwise path of one row (1x16 blocks), codes by `encode`. Eight blocks at a time: their amaxes
/// (one transpose max), E4M3 scales (the FP8 encoder of host_simd.hpp), decoded scales (a table) and
/// multipliers (one IEEE division) in one vector each, the same operations as the scalar rule; then
/// each block's codes. Leftover full blocks one at a time, a partial last block by the portable loops.
template <class T, class Encode>
TEQUANT_TARGET_AVX2 inline void nvfp4_row(const T* x, std::size_t K, float s_enc, float s_dec, std::uint8_t* data,
                                          std::uint8_t* scale, Encode encode) noexcept {
  constexpr std::size_t B = nvfp4_block;
  const std::size_t full = K / B;
  std::size_t b = 0;
  const __m256 block_factor = _mm256_set1_ps(s_enc * (1.0f / e2m1_max));
  const __m256 dec = _mm256_set1_ps(s_dec);
  for (; b + 8 <= full; b += 8) {
    const T* p = x + b * B;
    __m256i keys[8];
    for (int j = 0; j < 8; ++j)
      keys[j] = _mm256_max_epi32(amax_key8(load8(p + j * B)), amax_key8(load8(p + j * B + 8)));
    alignas(32) std::int32_t c[8];
    alignas(32) float m[8];
    nvfp4_block_scales8(_mm256_castsi256_ps(transpose_max8(keys)), block_factor, dec, c, m);
    for (int j = 0; j < 8; ++j) {
      const std::size_t bj = b + static_cast<std::size_t>(j);
      scale[bj] = static_cast<std::uint8_t>(c[j]);
      encode(p + j * B, _mm256_set1_ps(m[j]), bj * B, data + bj * (B / 2));
    }
  }
  for (; b < full; ++b) {
    const T* p = x + b * B;
    const __m256 v0 = load8(p), v1 = load8(p + 8);
    const std::uint8_t code = nvfp4_block_scale(block16_amax<T>(v0, v1), s_enc);
    scale[b] = code;
    encode(p, _mm256_set1_ps(nvfp4_block_multiplier(code, s_dec)), b * B, data + b * (B / 2));
  }
  if (full * B < K) {  // a partial last block: the scalar rule
    const std::size_t c0 = full * B, len = K - c0;
    const std::uint8_t code = nvfp4_block_scale(nvfp4_block_amax(x + c0, len, 1), s_enc);
    scale[full] = code;
    encode.tail(x + c0, len, nvfp4_block_multiplier(code, s_dec), c0, data + c0 / 2);
  }
}

}  // namespace avx2
#endif

/// One row's rowwise blocks, round to nearest (dispatched).
template <class T>
inline void nvfp4_row_rn_host(const T* x, std::size_t K, float s_enc, float s_dec, std::uint8_t* data,
                              std::uint8_t* scale) noexcept {
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (host_has_avx2()) return avx2::nvfp4_row(x, K, s_enc, s_dec, data, scale, avx2::nvfp4_encode_rn{});
#endif
  nvfp4_row_rn_scalar(x, K, s_enc, s_dec, data, scale);
}

/// One row's rowwise blocks, rounded stochastically with words[k] for element k (dispatched).
template <class T>
inline void nvfp4_row_sr_host(const T* x, std::size_t K, float s_enc, float s_dec, const std::uint32_t* words,
                              std::uint8_t* data, std::uint8_t* scale) noexcept {
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (host_has_avx2()) return avx2::nvfp4_row(x, K, s_enc, s_dec, data, scale, avx2::nvfp4_encode_sr{words});
#endif
  nvfp4_row_sr_scalar(x, K, s_enc, s_dec, words, data, scale);
}

/// One row's codes, round to nearest, block b multiplied by mult[b] (scales chosen by the caller).
template <class T>
inline void nvfp4_row_given_scales_host(const T* x, std::size_t K, const float* mult, std::uint8_t* data) noexcept {
  std::size_t b = 0;
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (host_has_avx2()) b = avx2::nvfp4_row_given_scales(x, K, mult, data);
#endif
  for (; b * nvfp4_block < K; ++b) {
    const std::size_t c0 = b * nvfp4_block;
    nvfp4_block_rn_scalar(x + c0, std::min<std::size_t>(nvfp4_block, K - c0), mult[b], data + c0 / 2);
  }
}

/// The columnwise blocks of one full 16-row block, round to nearest, as far as a vector kernel goes
/// (dispatched); returns the columns done, the rest is the caller's.
template <class T>
inline std::size_t nvfp4_columns16_rn_host(const T* x, std::size_t K, float s_enc, float s_dec, const float* tile_mult,
                                           nvfp4_column_block_out o) noexcept {
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (host_has_avx2()) {
    avx2::nvfp4_columns_rn encode;
    return avx2::nvfp4_columns16(x, K, s_enc, s_dec, tile_mult, o, encode);
  }
#endif
  (void)x, (void)K, (void)s_enc, (void)s_dec, (void)tile_mult, (void)o;
  return 0;
}

/// The same, rounded stochastically with words of elements k*M + r0 + i of the stream (seed, first group).
template <class T>
inline std::size_t nvfp4_columns16_sr_host(const T* x, std::size_t K, float s_enc, float s_dec, std::uint64_t seed,
                                           std::uint64_t first, std::size_t M, std::size_t r0,
                                           nvfp4_column_block_out o) noexcept {
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (host_has_avx2()) {
    avx2::nvfp4_columns_sr encode{seed, first, M, r0};
    return avx2::nvfp4_columns16(x, K, s_enc, s_dec, nullptr, o, encode);
  }
#endif
  (void)x, (void)K, (void)s_enc, (void)s_dec, (void)seed, (void)first, (void)M, (void)r0, (void)o;
  return 0;
}

/// Quantizes x [M, K] (M, K even; checked by the caller) into the requested directions of `o`.
template <class T>
void quantize_nvfp4_host(matrix_view<const T> x, const nvfp4_options& opt, const nvfp4_output& o, bool row, bool col,
                         scale_shape rs, scale_shape cs) {
  const std::size_t M = x.rows, K = x.cols, n = M * K;
  // Pass 1: the tensor's amax (NaN ignored). Without a Hadamard transform both directions share it.
  const float s_enc = nvfp4_global_encode_scale(amax_host(x.data, n));
  const float s_dec = div_rn(1.0f, s_enc);
  const bool sr = opt.rng_offset != nullptr;
  const std::uint64_t first = sr ? *opt.rng_offset : 0;
  if (row) {
    std::memset(o.rowwise_scale.data(), 0, o.rowwise_scale.size());
    o.rowwise_global_scale_inv[0] = s_dec;
  }
  if (col) {
    std::memset(o.columnwise_scale.data(), 0, o.columnwise_scale.size());
    o.columnwise_global_scale_inv[0] = s_dec;
  }
  const std::size_t KB = ceil_div(K, nvfp4_block), MB = ceil_div(M, nvfp4_block);
  // 16x16 tiles: one scale per tile for both directions.
  // A tile's amax is the max of its columns' amax keys over its rows (NaN ignored, as the block amax).
  std::vector<std::uint8_t> tile;
  std::vector<float> tile_mult;  // each tile's multiplier, for both directions
  if (opt.tile_2d) {
    tile.resize(MB * KB);
    tile_mult.resize(MB * KB);
    std::vector<std::uint32_t> colkey(K);
    for (std::size_t mb = 0; mb < MB; ++mb) {
      std::fill(colkey.begin(), colkey.end(), 0u);
      for (std::size_t r = mb * nvfp4_block; r < std::min(M, (mb + 1) * nvfp4_block); ++r)
        column_amax_host(x.data + r * K, K, colkey.data());
      for (std::size_t kb = 0; kb < KB; ++kb) {
        const auto first = colkey.begin() + static_cast<std::ptrdiff_t>(kb * nvfp4_block);
        const auto last = colkey.begin() + static_cast<std::ptrdiff_t>(std::min(K, (kb + 1) * nvfp4_block));
        tile[mb * KB + kb] = nvfp4_block_scale(bits_float(*std::max_element(first, last)), s_enc);
        tile_mult[mb * KB + kb] = nvfp4_block_multiplier(tile[mb * KB + kb], s_dec);
      }
    }
  }
  // Pass 2, rowwise: element index e = m*K + k of the stream's first n elements.
  if (row && !sr && !opt.tile_2d) {
    for (std::size_t m = 0; m < M; ++m)
      nvfp4_row_rn_host(x.data + m * K, K, s_enc, s_dec, o.rowwise_data.data() + m * K / 2,
                        o.rowwise_scale.data() + m * rs.cols);
  } else if (row && sr && !opt.tile_2d) {
    std::vector<std::uint32_t> words(K);  // the row's random words, drawn eight Philox blocks at a time
    for (std::size_t m = 0; m < M; ++m) {
      nvfp4_random_words(opt.rng_seed, first, static_cast<std::uint64_t>(m) * K, K, words.data());
      nvfp4_row_sr_host(x.data + m * K, K, s_enc, s_dec, words.data(), o.rowwise_data.data() + m * K / 2,
                        o.rowwise_scale.data() + m * rs.cols);
    }
  } else if (row && !sr) {  // 2D tiles: each block's scale is its tile's
    for (std::size_t mb = 0; mb < MB; ++mb)
      for (std::size_t m = mb * nvfp4_block; m < std::min(M, (mb + 1) * nvfp4_block); ++m) {
        std::memcpy(o.rowwise_scale.data() + m * rs.cols, tile.data() + mb * KB, KB);
        nvfp4_row_given_scales_host(x.data + m * K, K, tile_mult.data() + mb * KB, o.rowwise_data.data() + m * K / 2);
      }
  } else if (row) {
    nvfp4_host_random rnd(opt.rng_seed, first);
    for (std::size_t m = 0; m < M; ++m) {
      const T* xr = x.data + m * K;
      for (std::size_t kb = 0; kb < KB; ++kb) {
        const std::size_t c0 = kb * nvfp4_block, len = std::min<std::size_t>(nvfp4_block, K - c0);
        const std::uint8_t code =
            opt.tile_2d ? tile[(m / nvfp4_block) * KB + kb] : nvfp4_block_scale(nvfp4_block_amax(xr + c0, len, 1), s_enc);
        o.rowwise_scale[m * rs.cols + kb] = code;
        const float mult = nvfp4_block_multiplier(code, s_dec);
        for (std::size_t i = 0; i < len; ++i) {
          const std::size_t e = m * K + c0 + i;
          const float v = widen(xr[c0 + i]) * mult;
          put_nibble(o.rowwise_data.data(), e, sr ? encode_e2m1_stochastic(v, rnd(e)) : encode_e2m1(v));
        }
      }
    }
  }
  // Pass 2, columnwise (data transposed to [K, M]), round to nearest: 16 rows at a time in row order.
  // A full block of rows goes to the vector kernel as far as it goes; the rest, the same operations:
  // the blocks' column amaxes, their scales, then two rows per output byte.
  if (col && !sr) {
    std::vector<std::uint32_t> colkey(K);
    std::vector<float> mult(K);
    for (std::size_t mb = 0; mb < MB; ++mb) {
      const std::size_t r0 = mb * nvfp4_block, len = std::min<std::size_t>(nvfp4_block, M - r0);
      if (opt.tile_2d)
        for (std::size_t k = 0; k < K; ++k) {
          o.columnwise_scale[k * cs.cols + mb] = tile[mb * KB + k / nvfp4_block];
          mult[k] = tile_mult[mb * KB + k / nvfp4_block];
        }
      const std::size_t done =
          len < nvfp4_block ? 0
                            : nvfp4_columns16_rn_host(x.data + r0 * K, K, s_enc, s_dec, opt.tile_2d ? mult.data() : nullptr,
                                                      {o.columnwise_data.data() + r0 / 2, M / 2,
                                                       o.columnwise_scale.data() + mb, cs.cols});
      if (done == K) continue;
      if (!opt.tile_2d) {
        std::fill(colkey.begin() + static_cast<std::ptrdiff_t>(done), colkey.end(), 0u);
        for (std::size_t i = 0; i < len; ++i)
          column_amax_host(x.data + (r0 + i) * K + done, K - done, colkey.data() + done);
        for (std::size_t k = done; k < K; ++k) {
          const std::uint8_t code = nvfp4_block_scale(bits_float(colkey[k]), s_enc);
          o.columnwise_scale[k * cs.cols + mb] = code;
          mult[k] = nvfp4_block_multiplier(code, s_dec);
        }
      }
      for (std::size_t i = 0; i < len; i += 2) {  // len is even: M is, and r0 a multiple of 16
        const T* lo_row = x.data + (r0 + i) * K;
        const T* hi_row = lo_row + K;
        std::uint8_t* out = o.columnwise_data.data() + (r0 + i) / 2;
        for (std::size_t k = done; k < K; ++k)
          out[k * (M / 2)] = static_cast<std::uint8_t>(encode_e2m1(widen(lo_row[k]) * mult[k]) |
                                                       (encode_e2m1(widen(hi_row[k]) * mult[k]) << 4));
      }
    }
  }
  // Stochastic: element index e = k*M + m of a stream after the rowwise one, in that order.
  if (col && sr) {
    const std::uint64_t col_first = first + nvfp4_groups(n);
    std::size_t done = 0;  // columns of the full row blocks that the vector kernel did (the same for each)
    if (!opt.tile_2d)
      for (std::size_t r0 = 0; r0 + nvfp4_block <= M; r0 += nvfp4_block)
        done = nvfp4_columns16_sr_host(x.data + r0 * K, K, s_enc, s_dec, opt.rng_seed, col_first, M, r0,
                                       {o.columnwise_data.data() + r0 / 2, M / 2,
                                        o.columnwise_scale.data() + r0 / nvfp4_block, cs.cols});
    nvfp4_host_random rnd(opt.rng_seed, col_first);
    for (std::size_t k = 0; k < K; ++k) {
      for (std::size_t mb = 0; mb < MB; ++mb) {
        const std::size_t r0 = mb * nvfp4_block, len = std::min<std::size_t>(nvfp4_block, M - r0);
        if (k < done && len == nvfp4_block) continue;
        const std::uint8_t code = opt.tile_2d ? tile[mb * KB + k / nvfp4_block]
                                              : nvfp4_block_scale(nvfp4_block_amax(x.data + r0 * K + k, len, K), s_enc);
        o.columnwise_scale[k * cs.cols + mb] = code;
        const float mult = nvfp4_block_multiplier(code, s_dec);
        for (std::size_t i = 0; i < len; ++i) {
          const std::size_t e = k * M + r0 + i;
          const float v = widen(x.data[(r0 + i) * K + k]) * mult;
          put_nibble(o.columnwise_data.data(), e, sr ? encode_e2m1_stochastic(v, rnd(e)) : encode_e2m1(v));
        }
      }
    }
  }
  // The columnwise stream follows the rowwise one's place whether or not that was drawn, so the offset
  // moves past the last group drawn: a later cast never reuses a word of this one.
  if (sr) *opt.rng_offset = first + (col ? 2 * nvfp4_groups(n) : nvfp4_groups(n));
}

}  // namespace tequant::detail
