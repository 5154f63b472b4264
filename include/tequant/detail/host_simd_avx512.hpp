// SPDX-License-Identifier: Apache-2.0
// The AVX-512 host kernels (x86 with g++/clang, chosen at run time by host_simd.hpp): the bf16 casts,
// and the MXFP8 (rowwise, columnwise) and FP8 block-scaling casts of fp32 and bf16; the cases they
// leave (scales that are not finite and > 0, MXFP8 rowwise blocks with code 254) go to the AVX2 ones.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tequant/config.hpp"
#include "tequant/detail/host_simd_avx2.hpp"

namespace tequant::detail {

// ---- AVX-512 (F, BW, VL, DQ, VBMI; x86, chosen at run time): the bf16 casts -------------------------
//
// The AVX2 bf16 cast spends 93 instructions per 32 elements (with the fused amax; 76 without) and is
// bound by them, not by memory. This one spends 29 (28) per 32 (512-bit; Zen 4 executes them as two
// 256-bit halves, so the win is the instruction count):
// - widening without a shuffle: the even elements are the 32-bit lanes << 16, the odd ones the lanes
//   with the low half cleared; one vpermt2b interleaves the two halves' codes back into order;
// - the encoder of encode8 with its clamp in one vrangeps and, because only the low byte of each
//   code is kept, the exponent part folded into c's low mantissa bits (an even constant, so the FPU's
//   ties-to-even is unchanged) and c >> (23 - mant);
// - sign and NaN from the bf16 inputs, 32 at a time, once for all lanes: the sign bytes are the high
//   bytes of the inputs, and the NaN mask (a 16-bit compare into a mask register) also drives the amax
//   (a masked 16-bit max). This needs y = x * s to be NaN exactly where x is and of x's sign: s finite
//   and > 0. Other scales (and MXFP8's inf blocks, multiplier 0) take the AVX2 kernels.
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
// GCC 12's 512-bit intrinsics pass _mm512_undefined_*() (a self-initialised variable) as the unused
// merge source, which -Wuninitialized reports wherever they are inlined (GCC bug 105593).
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic push
#    pragma GCC diagnostic ignored "-Wuninitialized"
#    pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#  endif
namespace avx512 {

/// Low byte of each 32-bit lane: the FP8 code of |y| (sign 0, NaN lanes undefined); the other bytes
/// are undefined. The same rounding as avx2::encode8 (checked against the scalar encoders on all 2^32
/// floats, label exhaustive, and through the kernels on every bf16 input times many scales).
template <fp8_dtype D>
TEQUANT_TARGET_AVX512_INLINE inline __m512i code_low_bytes16(__m512 y) noexcept {
  using tr = fp8_traits<D>;
  constexpr int emin_biased = 127 + 1 - tr::bias;
  constexpr int sh = 23 - tr::mant;
  // bits(c) low byte = j, and c >> sh = (E + sh) << mant: j + ((E + sh) << mant) = (E - emin) << mant (mod 256).
  constexpr int j = (256 * 4 - (emin_biased << tr::mant) - (sh << tr::mant)) & 0xFF;
  static_assert(j % 2 == 0, "c's mantissa must stay even for ties-to-even");
  const __m512 mag = _mm512_range_ps(y, _mm512_set1_ps(fp8_max(D)), 0x0A);  // min(|y|, max), sign cleared
  const __m512 lo = _mm512_max_ps(mag, _mm512_castsi512_ps(_mm512_set1_epi32(emin_biased << 23)));
  const __m512i c = _mm512_add_epi32(_mm512_and_si512(_mm512_castps_si512(lo), _mm512_set1_epi32(0x7F800000)),
                                     _mm512_set1_epi32((sh << 23) + j));
  const __m512i sum = _mm512_castps_si512(_mm512_add_ps(mag, _mm512_castsi512_ps(c)));
  return _mm512_add_epi32(sum, _mm512_srli_epi32(c, sh));
}

/// Codes of the 32 bf16 in `a` times the multipliers (finite, > 0) s_even (of elements 0, 2, ..., 30)
/// and s_odd (1, 3, ..., 31), in order. When Amax, m (16-bit lanes) is max-accumulated with the
/// sign-cleared bf16 patterns of the non-NaN inputs.
template <fp8_dtype D, bool Amax>
TEQUANT_TARGET_AVX512_INLINE inline __m256i encode32(__m512i a, __m512 s_even, __m512 s_odd, __m512i& m) noexcept {
  const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
  const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(a, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  const __m512i ce = code_low_bytes16<D>(_mm512_mul_ps(even, s_even));
  const __m512i co = code_low_bytes16<D>(_mm512_mul_ps(odd, s_odd));
  // Byte k of the result: element k's code, byte 0 of lane k / 2 of ce (even k) or of co (odd k).
  const __m512i interleave = _mm512_set_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                             0, 0, 0, 0, 124, 60, 120, 56, 116, 52, 112, 48, 108, 44, 104, 40, 100, 36,
                                             96, 32, 92, 28, 88, 24, 84, 20, 80, 16, 76, 12, 72, 8, 68, 4, 64, 0);
  const __m256i codes = _mm512_castsi512_si256(_mm512_permutex2var_epi8(ce, interleave, co));
  const __m512i high_bytes = _mm512_set_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                             0, 0, 0, 0, 63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33,
                                             31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
  const __m256i signs = _mm512_castsi512_si256(_mm512_permutexvar_epi8(high_bytes, a));
  const __m512i abs = _mm512_and_si512(a, _mm512_set1_epi16(0x7FFF));
  const __mmask32 ok = _mm512_cmple_epu16_mask(abs, _mm512_set1_epi16(0x7F80));  // not NaN
  if constexpr (Amax) m = _mm512_mask_max_epu16(m, ok, m, abs);
  // codes | (signs & 0x80), then NaN -> 0x7F.
  const __m256i r = _mm256_ternarylogic_epi32(codes, signs, _mm256_set1_epi8(static_cast<char>(0x80)), 0xF8);
  return _mm256_mask_blend_epi8(ok, _mm256_set1_epi8(0x7F), r);
}

/// encode32 with one multiplier s (finite, > 0) for all 32 elements.
template <fp8_dtype D, bool Amax>
TEQUANT_TARGET_AVX512_INLINE inline __m256i encode32(__m512i a, __m512 s, __m512i& m) noexcept {
  return encode32<D, Amax>(a, s, s, m);
}

// ---- bf16 times a power of two, in 16-bit lanes ----------------------------------------------------
//
// The method of host_simd_avx2_pow2.hpp on 32 lanes per vector: one vector for 32 elements where
// encode32 widens them to two float vectors, 16 instructions per 32 instead of 24. Lanes it reports
// (products below FP8's smallest normal, bf16 subnormals) the caller casts with encode32.

/// Per-multiplier constants of encode32_pow2 (16-bit lanes, or one value broadcast).
struct pow2_lanes {
  __m512i add;  ///< ((j + bias - 127) << 7) + the rounding half minus one
  __m512i lo;   ///< the smallest sign-cleared pattern whose product is an FP8 normal (at least 0x80)
};

using avx2::pow2_constants8;  // the constants and the multiplier test are shared with the AVX2 form
using avx2::pow2_multiplier;

/// pow2_constants8 for one multiplier, broadcast.
template <fp8_dtype D>
TEQUANT_TARGET_AVX512_INLINE inline pow2_lanes pow2_constants(float mult) noexcept {
  alignas(32) std::int32_t add[8], lo[8];
  __m256i a, l;
  pow2_constants8<D>(_mm256_castps_si256(_mm256_set1_ps(mult)), a, l);
  _mm256_store_si256(reinterpret_cast<__m256i*>(add), a);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lo), l);
  return {_mm512_set1_epi16(static_cast<short>(add[0])), _mm512_set1_epi16(static_cast<short>(lo[0]))};
}

/// Codes of the 32 bf16 in a times 2^j (c: pow2_constants of 2^j), in order, as encode32 gives them,
/// except for the lanes set in the returned mask (nonzero lanes below c.lo: their codes are undefined).
/// Inf = false: as avx2::encode16_pow2's (no +-inf lane meets a j below pow2_inf_saturates_from);
/// it saves the inf compare and masked move, 2 of 15 vector instructions per 32 elements.
template <fp8_dtype D, bool Inf = true>
TEQUANT_TARGET_AVX512_INLINE inline __m256i encode32_pow2(__m512i a, const pow2_lanes& c, __mmask32& slow) noexcept {
  using tr = fp8_traits<D>;
  constexpr int sh = 7 - tr::mant;
  const __m512i abs = _mm512_and_si512(a, _mm512_set1_epi16(0x7FFF));
  const __mmask32 small = _mm512_cmplt_epu16_mask(abs, c.lo);  // zeros included (lo >= 0x80)
  slow = _mm512_mask_test_epi16_mask(small, abs, abs);
  const __mmask32 nan = _mm512_cmpgt_epu16_mask(abs, _mm512_set1_epi16(0x7F80));
  // Ties to even: the rounding half minus one (in c.add), plus one where the kept part is odd.
  __m512i t = _mm512_add_epi16(abs, c.add);
  t = _mm512_mask_add_epi16(t, _mm512_test_epi16_mask(abs, _mm512_set1_epi16(1 << sh)), t, _mm512_set1_epi16(1));
  const __m512i max_code = _mm512_set1_epi16(static_cast<short>(tr::max_code));
  __m512i code = _mm512_maskz_min_epu16(static_cast<__mmask32>(~small), _mm512_srli_epi16(t, sh), max_code);
  // inf * 2^j is inf, which saturates (its exponent field read as a number would not, for j < 0).
  if constexpr (Inf) code = _mm512_mask_mov_epi16(code, _mm512_cmpeq_epi16_mask(abs, _mm512_set1_epi16(0x7F80)), max_code);
  // code | (the sign byte & 0x80), then NaN -> 0x7F.
  const __m512i r = _mm512_ternarylogic_epi32(code, _mm512_srli_epi16(a, 8), _mm512_set1_epi16(0x80), 0xF8);
  return _mm512_cvtepi16_epi8(_mm512_mask_mov_epi16(r, nan, _mm512_set1_epi16(0x7F)));
}

/// 32 bytes at out (Stream: non-temporal, out 16-byte aligned; Aligned32: one 32-byte store, out 32-byte aligned).
template <bool Stream, bool Aligned32 = false>
TEQUANT_TARGET_AVX512_INLINE inline void store32(std::uint8_t* out, __m256i v) noexcept {
  if constexpr (Stream && Aligned32) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(out), v);
  } else if constexpr (Stream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(v));
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + 16), _mm256_extracti128_si256(v, 1));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), v);
  }
}

/// Largest 16-bit lane of m, as a 32-bit amax key (<< 16).
TEQUANT_TARGET_AVX512_INLINE inline std::uint32_t hmax_key16(__m512i m) noexcept {
  const __m512i w = _mm512_max_epu32(_mm512_and_si512(m, _mm512_set1_epi32(0xFFFF)), _mm512_srli_epi32(m, 16));
  return _mm512_reduce_max_epu32(w) << 16;
}

/// m (16-bit lanes) max-accumulated with the sign-cleared patterns of the non-NaN bf16 in a.
TEQUANT_TARGET_AVX512_INLINE inline __m512i max_keys16(__m512i m, __m512i a) noexcept {
  const __m512i abs = _mm512_and_si512(a, _mm512_set1_epi16(0x7FFF));
  return _mm512_mask_max_epu16(m, _mm512_cmple_epu16_mask(abs, _mm512_set1_epi16(0x7F80)), m, abs);
}

/// avx2::amax for bf16 (the current-scaling amax pass): 64 elements per step, three instructions per 32.
TEQUANT_TARGET_AVX512 inline std::uint32_t amax(const bf16* x, std::size_t n) noexcept {
  std::size_t i = 0;
  __m512i m0 = _mm512_setzero_si512(), m1 = m0;
  for (; i + 64 <= n; i += 64) {
    avx2::prefetch_bytes(reinterpret_cast<const char*>(x + i) + avx2::stream_prefetch_bytes, 128);
    m0 = max_keys16(m0, _mm512_loadu_si512(x + i));
    m1 = max_keys16(m1, _mm512_loadu_si512(x + i + 32));
  }
  if (i + 32 <= n) {
    m0 = max_keys16(m0, _mm512_loadu_si512(x + i));
    i += 32;
  }
  const std::uint32_t m = hmax_key16(_mm512_max_epu16(m0, m1));
  const std::uint32_t t = amax_bits_scalar(x + i, n - i);
  return t > m ? t : m;
}

template <fp8_dtype D, bool Stream, bool Amax>
TEQUANT_TARGET_AVX512 inline __m512i scale_encode_run(const bf16* x, std::size_t& i, std::size_t n, __m512 s,
                                                      std::uint8_t* out) noexcept {
  __m512i m = _mm512_setzero_si512();
  for (; i + 32 <= n; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(x + i) + avx2::stream_prefetch_bytes, _MM_HINT_T0);
    store32<Stream, true>(out + i, encode32<D, Amax>(_mm512_loadu_si512(x + i), s, m));
  }
  return m;
}

template <fp8_dtype D, bool Stream>
TEQUANT_TARGET_AVX512 inline std::uint32_t scale_encode_any(const bf16* x, std::size_t& i, std::size_t n, __m512 s,
                                                            std::uint8_t* out, bool with_amax) noexcept {
  return hmax_key16(with_amax ? scale_encode_run<D, Stream, true>(x, i, n, s, out)
                              : scale_encode_run<D, Stream, false>(x, i, n, s, out));
}

/// avx2::scale_encode for bf16.
template <fp8_dtype D>
TEQUANT_TARGET_AVX512 inline std::uint32_t scale_encode(const bf16* x, std::size_t n, float scale, std::uint8_t* out, bool with_amax,
                                                        std::size_t stream_min = avx2::per_tensor_stream_min_bytes()) noexcept {
  if (!(scale > 0.0f && scale <= 3.40282347e38f)) return avx2::scale_encode<D>(x, n, scale, out, with_amax, stream_min);
  std::size_t i = 0;
  const __m512 s = _mm512_set1_ps(scale);
  std::uint32_t m = 0;
  if (n >= stream_min) {
    // The elements before the first 32-byte boundary of out go through the scalar loop.
    const std::size_t head = (32 - reinterpret_cast<std::uintptr_t>(out) % 32) % 32;
    m = scale_encode_scalar<D>(x, head, scale, out, with_amax);
    i = head;
    const std::uint32_t mv = scale_encode_any<D, true>(x, i, n, s, out, with_amax);
    avx2::stream_fence();
    m = mv > m ? mv : m;
  } else {
    m = scale_encode_any<D, false>(x, i, n, s, out, with_amax);
  }
  const std::uint32_t t = scale_encode_scalar<D>(x + i, n - i, scale, out + i, with_amax);
  return t > m ? t : m;
}

/// Lane b of the result = the largest 16-bit lane of k[b], << 16 (eight block amax keys).
TEQUANT_TARGET_AVX512_INLINE inline __m256i block_keys8(const __m512i* k) noexcept {
  __m512i t[4];
  for (int p = 0; p < 4; ++p)  // 128-bit lanes 0-1: block 2p's halves' max, 2-3: block 2p + 1's
    t[p] = _mm512_max_epu16(_mm512_shuffle_i64x2(k[2 * p], k[2 * p + 1], 0x44), _mm512_shuffle_i64x2(k[2 * p], k[2 * p + 1], 0xEE));
  // 128-bit lane L: block L (u) and block 4 + L (v).
  const __m512i u = _mm512_max_epu16(_mm512_shuffle_i64x2(t[0], t[1], 0x88), _mm512_shuffle_i64x2(t[0], t[1], 0xDD));
  const __m512i v = _mm512_max_epu16(_mm512_shuffle_i64x2(t[2], t[3], 0x88), _mm512_shuffle_i64x2(t[2], t[3], 0xDD));
  __m512i w = _mm512_max_epu16(_mm512_unpacklo_epi64(u, v), _mm512_unpackhi_epi64(u, v));  // qword 0: u, 1: v
  w = _mm512_max_epu16(w, _mm512_shuffle_epi32(w, _MM_PERM_CDAB));
  w = _mm512_slli_epi32(_mm512_max_epu16(w, _mm512_srli_epi32(w, 16)), 16);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0), w));
}

/// The amax keys of the eight blocks of 32 at p (lane b: block b).
TEQUANT_TARGET_AVX512_INLINE inline __m256i group_keys8(const bf16* p) noexcept {
  __m512i k[8];
  for (int b = 0; b < 8; ++b) k[b] = max_keys16(_mm512_setzero_si512(), _mm512_loadu_si512(p + b * 32));
  return block_keys8(k);
}

/// Byte k (k < 32) = byte 4k + Byte of the 32-bit lanes of a (k < 16) and b (k >= 16); vpermt2b index.
template <int Byte>
TEQUANT_TARGET_AVX512_INLINE inline __m512i lane_byte_index() noexcept {
  // Bytes 0-31 of the index: 4k + Byte (k < 16 picks from a, 64 + 4(k - 16) + Byte = 4k + Byte from b).
  return _mm512_add_epi8(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0x7C787470, 0x6C686460, 0x5C585450, 0x4C484440,
                                          0x3C383430, 0x2C282420, 0x1C181410, 0x0C080400),
                         _mm512_set1_epi8(static_cast<char>(Byte)));
}

/// Codes of the 32 floats in a (elements 0-15) and b (16-31) times s (finite, > 0), in order.
template <fp8_dtype D>
TEQUANT_TARGET_AVX512_INLINE inline __m256i encode32f(__m512 a, __m512 b, __m512 s) noexcept {
  const __m512i ca = code_low_bytes16<D>(_mm512_mul_ps(a, s));
  const __m512i cb = code_low_bytes16<D>(_mm512_mul_ps(b, s));
  const __m256i codes = _mm512_castsi512_si256(_mm512_permutex2var_epi8(ca, lane_byte_index<0>(), cb));
  const __m256i signs = _mm512_castsi512_si256(
      _mm512_permutex2var_epi8(_mm512_castps_si512(a), lane_byte_index<3>(), _mm512_castps_si512(b)));
  const __mmask32 nan = _mm512_kunpackw(_mm512_cmp_ps_mask(b, b, _CMP_UNORD_Q), _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q));
  // codes | (signs & 0x80), then NaN -> 0x7F (y = x * s is NaN exactly where x is, and of x's sign).
  const __m256i r = _mm256_ternarylogic_epi32(codes, signs, _mm256_set1_epi8(static_cast<char>(0x80)), 0xF8);
  return _mm256_mask_blend_epi8(nan, r, _mm256_set1_epi8(0x7F));
}

/// Lane b of the result = the largest 32-bit lane of k[b] (eight fp32 amax keys: non-negative,
/// non-NaN floats as bits, which order as their values).
TEQUANT_TARGET_AVX512_INLINE inline __m256i float_keys8(const __m512i* k) noexcept {
  __m256i h[8];
  for (int b = 0; b < 8; ++b) h[b] = _mm256_max_epu32(_mm512_castsi512_si256(k[b]), _mm512_extracti64x4_epi64(k[b], 1));
  return avx2::transpose_max8(h);
}

/// group_keys8 for fp32: NaN-skipping float maxima (maxps returns its second operand on NaN) as bits.
TEQUANT_TARGET_AVX512_INLINE inline __m256i group_keys8(const float* p) noexcept {
  __m512i k[8];
  for (int b = 0; b < 8; ++b) {
    const __m512 m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(p + b * 32)), _mm512_setzero_ps());
    k[b] = _mm512_castps_si512(_mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(p + b * 32 + 16)), m));
  }
  return float_keys8(k);
}

/// The codes of the 32 elements at p times s (finite, > 0).
template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX512_INLINE inline __m256i encode32_at(const T* p, __m512 s) noexcept {
  if constexpr (std::is_same_v<T, bf16>) {
    __m512i unused = _mm512_setzero_si512();
    return encode32<D, false>(_mm512_loadu_si512(p), s, unused);
  } else {
    return encode32f<D>(_mm512_loadu_ps(p), _mm512_loadu_ps(p + 16), s);
  }
}

/// The eight MXFP8 blocks of 32 bf16 at p with multipliers mult (lanes; powers of two, as float bits;
/// also in mv; no block has code 254, so none holds an inf) at out: encode32_pow2, and encode32 for the
/// blocks where it reports a lane (after the eight, so that the common case has no branch between them).
template <fp8_dtype D, bool Stream>
TEQUANT_TARGET_AVX512_INLINE inline void cast_group_pow2(const bf16* p, __m256i mult, const float* mv, std::uint8_t* out) noexcept {
  alignas(32) std::int32_t add[8], lo[8];
  __m256i a8, l8;
  pow2_constants8<D>(mult, a8, l8);
  _mm256_store_si256(reinterpret_cast<__m256i*>(add), a8);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lo), l8);
  __mmask32 slow[8];
#  if !defined(__CUDACC__)
#    pragma GCC unroll 8
#  endif
  for (int b = 0; b < 8; ++b) {
    const pow2_lanes c{_mm512_set1_epi16(static_cast<short>(add[b])), _mm512_set1_epi16(static_cast<short>(lo[b]))};
    store32<Stream>(out + b * 32, encode32_pow2<D, false>(_mm512_loadu_si512(p + b * 32), c, slow[b]));  // no inf
  }
  const __mmask32 any = _kor_mask32(_kor_mask32(_kor_mask32(slow[0], slow[1]), _kor_mask32(slow[2], slow[3])),
                                    _kor_mask32(_kor_mask32(slow[4], slow[5]), _kor_mask32(slow[6], slow[7])));
  if (any == 0) return;
  for (int b = 0; b < 8; ++b)
    if (slow[b]) store32<Stream>(out + b * 32, encode32_at<D>(p + b * 32, _mm512_set1_ps(mv[b])));
}

/// avx2::mxfp8_rowwise_run for bf16 and fp32: eight blocks' amaxes, their codes and multipliers 8-wide, each
/// block cast from L1. Software-pipelined: the next group's amaxes are computed before this group is
/// cast (they do not depend on it), so the out-of-order core overlaps the reduction with the cast
/// instead of waiting on its dependency chain (measured from L2: 0.200 -> 0.185 ns per element).
/// Each block's multiplier is broadcast from memory (a load-port operand, instead of a vpermps on the
/// vector pipes). The input is prefetched stream_prefetch_bytes ahead: on Zen 4 software prefetches
/// (two per block, 2 KiB ahead) only took issue slots, but on the Xeon measured later the hardware
/// prefetcher alone left 64 MiB at 8.8 / 10.0 ms (fp32 / bf16) against 7.6 / 8.1 with them.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX512 inline void mxfp8_rowwise_run(const T* x, std::size_t M, std::size_t K, std::uint8_t* data,
                                                    std::uint8_t* scale, std::size_t scale_cols) noexcept {
  const std::size_t KB = K / 32, groups = KB / 8;
  for (std::size_t m = 0; m < M; ++m) {
    const T* src = x + m * K;
    std::uint8_t* dst = data + m * K;
    std::uint8_t* sc = scale + m * scale_cols;
    __m256i keys = groups ? group_keys8(src) : _mm256_setzero_si256();
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t kb = g * 8;
      const T* p = src + kb * 32;
      const __m256i e = avx2::e8m0_codes8<D>(keys);
      avx2::store8_bytes(sc + kb, e);
      const __m256 mult = avx2::e8m0_multipliers8(e);
      alignas(32) float mv[8];
      _mm256_store_ps(mv, mult);
      if (g + 1 < groups) keys = group_keys8(p + 256);
      avx2::prefetch_bytes(reinterpret_cast<const char*>(p) + avx2::stream_prefetch_bytes, 256 * sizeof(T));
      // Code 254 (an inf or overflowing block) has multiplier 0, where inf * 0 is NaN: the AVX2 cast.
      const unsigned zero_mult = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_set1_epi32(254)))));
      if (zero_mult == 0) {  // the common case, unrolled: no branches, constants kept in registers
        if constexpr (std::is_same_v<T, bf16>) {
          cast_group_pow2<D, Stream>(p, _mm256_castps_si256(mult), mv, dst + kb * 32);
        } else {
#  if !defined(__CUDACC__)  // nvcc's front end does not know the pragma (its own unroll is for device code)
#    pragma GCC unroll 8
#  endif
          for (int b = 0; b < 8; ++b) store32<Stream>(dst + kb * 32 + b * 32, encode32_at<D>(p + b * 32, _mm512_set1_ps(mv[b])));
        }
      } else {
        for (int b = 0; b < 8; ++b) {
          if ((zero_mult >> b) & 1u) {
            avx2::encode32<D, Stream>(p + b * 32, _mm256_set1_ps(mv[b]), dst + kb * 32 + b * 32);
          } else {
            store32<Stream>(dst + kb * 32 + b * 32, encode32_at<D>(p + b * 32, _mm512_set1_ps(mv[b])));
          }
        }
      }
    }
    for (std::size_t kb = groups * 8; kb < KB; ++kb) {
      const std::uint8_t e = mxfp8_code<D>(avx2::hmax_epi32(avx2::keys32(src + kb * 32)));
      sc[kb] = e;
      avx2::encode32<D, Stream>(src + kb * 32, _mm256_set1_ps(e8m0_cast_multiplier(e)), dst + kb * 32);
    }
  }
}

template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX512 inline void mxfp8_rowwise(const T* x, std::size_t M, std::size_t K, std::uint8_t* data,
                                                std::uint8_t* scale, std::size_t scale_cols, bool stream) noexcept {
  if (avx2::use_streaming_stores(stream, data, K)) {
    mxfp8_rowwise_run<D, true>(x, M, K, data, scale, scale_cols);
    avx2::stream_fence();
  } else {
    mxfp8_rowwise_run<D, false>(x, M, K, data, scale, scale_cols);
  }
}

/// Codes of the 16 floats y (any: sign and NaN from y itself), one byte each, in order.
template <fp8_dtype D>
TEQUANT_TARGET_AVX512_INLINE inline __m128i encode16(__m512 y) noexcept {
  const __m512i yb = _mm512_castps_si512(y);
  const __m512i c = _mm512_ternarylogic_epi32(code_low_bytes16<D>(y), _mm512_srli_epi32(yb, 24), _mm512_set1_epi32(0x80), 0xF8);
  return _mm512_cvtepi32_epi8(_mm512_mask_mov_epi32(c, _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q), _mm512_set1_epi32(0x7F)));
}

/// 16 bytes at out (Stream: non-temporal, out 16-byte aligned).
template <bool Stream>
TEQUANT_TARGET_AVX512_INLINE inline void store16(std::uint8_t* out, __m128i v) noexcept {
  if constexpr (Stream) _mm_stream_si128(reinterpret_cast<__m128i*>(out), v);
  else _mm_storeu_si128(reinterpret_cast<__m128i*>(out), v);
}

/// Columns per pass of mxfp8_columnwise_rows: 32 rows of them (512 KiB of fp32, 256 KiB of bf16) stay
/// in L2 between its two passes, their multipliers (16 KiB) in L1.
inline constexpr std::size_t mxfp8_columnwise_chunk = 4096;

/// MXFP8 32x1 blocks of columns [0, W) of the 32 rows at x (row stride K; W a multiple of 32, at most
/// mxfp8_columnwise_chunk): codes at data (row stride K), E8M0 codes at scale[0, W). Two passes, each
/// reading whole rows in order (what the hardware prefetcher follows): the column amaxes (NaN-skipping
/// float maxima, kept in mult), then the cast from L2 with the per-column multipliers. While it casts,
/// the next chunk (its first min(W, next_w) columns of 32 rows at next, row stride K; next_w = 0: none)
/// is prefetched into L2 (T1; T0 measured much slower, presumably evicting mult from L1), so the next
/// amax pass reads from L2 and the memory reads overlap the cast (without the prefetch this kernel
/// waits for memory in its amax pass and for the FPU in its cast pass, in turns). The AVX2 kernel of
/// the same name has the same two passes; docs/benchmarks.md has the figures.
template <fp8_dtype D, bool Stream>
TEQUANT_TARGET_AVX512 inline void mxfp8_columnwise_rows(const float* x, std::size_t K, std::size_t W, std::uint8_t* data,
                                                        std::uint8_t* scale, const float* next, std::size_t next_w) noexcept {
  alignas(64) float mult[mxfp8_columnwise_chunk];
  const __m512 abs_mask = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FFFFFFF));
  for (std::size_t c = 0; c < W; c += 16) _mm512_store_ps(mult + c, _mm512_setzero_ps());
  for (std::size_t r = 0; r < 32; ++r) {
    const float* p = x + r * K;
    // max returns its second operand when either is NaN: a NaN element leaves the column max as it was.
    for (std::size_t c = 0; c < W; c += 16)
      _mm512_store_ps(mult + c, _mm512_max_ps(_mm512_and_ps(_mm512_loadu_ps(p + c), abs_mask), _mm512_load_ps(mult + c)));
  }
  for (std::size_t c = 0; c < W; c += 8) {
    const __m256i e = avx2::e8m0_codes8<D>(_mm256_castps_si256(_mm256_load_ps(mult + c)));
    avx2::store8_bytes(scale + c, e);
    _mm256_store_ps(mult + c, avx2::e8m0_multipliers8(e));
  }
  for (std::size_t r = 0; r < 32; ++r) {
    const float* p = x + r * K;
    std::uint8_t* out = data + r * K;
    std::size_t c = 0;
    const char* pf = next_w ? reinterpret_cast<const char*>(next + r * K) : nullptr;
    for (; c + 64 <= W; c += 64) {
      if (c < next_w)
        for (int j = 0; j < 4; ++j) _mm_prefetch(pf + c * 4 + 64 * j, _MM_HINT_T1);
      for (int j = 0; j < 4; ++j)
        store16<Stream>(out + c + 16 * j, encode16<D>(_mm512_mul_ps(_mm512_loadu_ps(p + c + 16 * j), _mm512_load_ps(mult + c + 16 * j))));
    }
    for (; c < W; c += 16) store16<Stream>(out + c, encode16<D>(_mm512_mul_ps(_mm512_loadu_ps(p + c), _mm512_load_ps(mult + c))));
  }
}

/// mxfp8_columnwise_rows for bf16: the amaxes on the 16-bit patterns (max_keys16), the cast with
/// encode32_pow2 and each column's constants (in the keys' place), and with encode32 where it reports
/// a lane (each 32 columns' multipliers split into the even and the odd columns, encode32's lanes).
/// Both need multipliers > 0; a chunk with code 254 (an inf or overflowing block: multiplier 0, where
/// inf * 0 is NaN) is cast with encode32, and its 32 columns with that code with encode16 on the
/// widened halves.
template <fp8_dtype D, bool Stream>
TEQUANT_TARGET_AVX512 inline void mxfp8_columnwise_rows(const bf16* x, std::size_t K, std::size_t W, std::uint8_t* data,
                                                        std::uint8_t* scale, const bf16* next, std::size_t next_w) noexcept {
  constexpr std::size_t N = mxfp8_columnwise_chunk;
  alignas(64) std::uint16_t keys[N];  // the column amaxes, then encode32_pow2's `add` of each column
  alignas(64) std::uint16_t lo[N];    // encode32_pow2's `lo` of each column
  alignas(64) float mult[N];  // per 32 columns: the 16 even columns' multipliers, then the 16 odd ones'
  std::uint32_t zero_mult[N / 32 / 32] = {};  // bit kb: the chunk of columns [32 kb, 32 kb + 32) has code 254
  for (std::size_t c = 0; c < W; c += 32) _mm512_store_si512(keys + c, _mm512_setzero_si512());
  for (std::size_t r = 0; r < 32; ++r) {
    const bf16* p = x + r * K;
    for (std::size_t c = 0; c < W; c += 32)
      _mm512_store_si512(keys + c, max_keys16(_mm512_load_si512(keys + c), _mm512_loadu_si512(p + c)));
  }
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (std::size_t c = 0; c < W; c += 32) {
    __m512 m[2];
    unsigned z = 0;
    for (int h = 0; h < 2; ++h) {
      __m256 mh[2];
      for (int q = 0; q < 2; ++q) {
        const __m128i k16 = _mm_load_si128(reinterpret_cast<const __m128i*>(keys + c + 16 * h + 8 * q));
        const __m256i e = avx2::e8m0_codes8<D>(_mm256_slli_epi32(_mm256_cvtepu16_epi32(k16), 16));
        avx2::store8_bytes(scale + c + 16 * h + 8 * q, e);
        z |= static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_set1_epi32(254)))));
        mh[q] = avx2::e8m0_multipliers8(e);
        __m256i add8, lo8;
        pow2_constants8<D>(_mm256_castps_si256(mh[q]), add8, lo8);
        _mm_store_si128(reinterpret_cast<__m128i*>(keys + c + 16 * h + 8 * q), _mm256_cvtepi32_epi16(add8));
        _mm_store_si128(reinterpret_cast<__m128i*>(lo + c + 16 * h + 8 * q), _mm256_cvtepi32_epi16(lo8));
      }
      m[h] = _mm512_insertf32x8(_mm512_castps256_ps512(mh[0]), mh[1], 1);
    }
    _mm512_store_ps(mult + c, _mm512_permutex2var_ps(m[0], even, m[1]));
    _mm512_store_ps(mult + c + 16, _mm512_permutex2var_ps(m[0], odd, m[1]));
    if (z) zero_mult[c / 1024] |= 1u << (c / 32 % 32);
  }
  bool any_zero = false;
  for (std::size_t i = 0; i < (W + 1023) / 1024; ++i) any_zero = any_zero || zero_mult[i] != 0;
  __m512i unused = _mm512_setzero_si512();
  for (std::size_t r = 0; r < 32; ++r) {
    const bf16* p = x + r * K;
    std::uint8_t* out = data + r * K;
    const char* pf = next_w ? reinterpret_cast<const char*>(next + r * K) : nullptr;
    if (!any_zero) {  // every multiplier a power of two: encode32_pow2, then encode32 where it reports a lane
      __mmask32 any = 0;
      for (std::size_t c = 0; c < W; c += 32) {
        if (c < next_w) _mm_prefetch(pf + c * 2, _MM_HINT_T1);
        __mmask32 slow;
        const pow2_lanes pc{_mm512_load_si512(keys + c), _mm512_load_si512(lo + c)};
        store32<Stream>(out + c, encode32_pow2<D, false>(_mm512_loadu_si512(p + c), pc, slow));  // no code 254: no inf
        any = _kor_mask32(any, slow);
      }
      if (any == 0) continue;
      for (std::size_t c = 0; c < W; c += 32) {
        __mmask32 slow;
        const __m512i a = _mm512_loadu_si512(p + c);
        const pow2_lanes pc{_mm512_load_si512(keys + c), _mm512_load_si512(lo + c)};
        (void)encode32_pow2<D, false>(a, pc, slow);
        if (slow) store32<Stream>(out + c, encode32<D, false>(a, _mm512_load_ps(mult + c), _mm512_load_ps(mult + c + 16), unused));
      }
      continue;
    }
    for (std::size_t c = 0; c < W; c += 32) {
      if (c < next_w) _mm_prefetch(pf + c * 2, _MM_HINT_T1);
      const __m512i a = _mm512_loadu_si512(p + c);
      if ((zero_mult[c / 1024] >> (c / 32 % 32)) & 1u) {
        const __m512 ev = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
        const __m512 od = _mm512_castsi512_ps(_mm512_and_si512(a, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
        const __m128i ce = encode16<D>(_mm512_mul_ps(ev, _mm512_load_ps(mult + c)));
        const __m128i co = encode16<D>(_mm512_mul_ps(od, _mm512_load_ps(mult + c + 16)));
        store32<Stream>(out + c, _mm256_setr_m128i(_mm_unpacklo_epi8(ce, co), _mm_unpackhi_epi8(ce, co)));
      } else {
        store32<Stream>(out + c, encode32<D, false>(a, _mm512_load_ps(mult + c), _mm512_load_ps(mult + c + 16), unused));
      }
    }
  }
}

/// MXFP8 32x1 columnwise blocks of x [M, K] (M and K multiples of 32; fp32 and bf16): data [M, K], the
/// E8M0 codes of rows [32 mb, 32 mb + 32) at scale[mb * scale_cols + k]. Chunks of mxfp8_columnwise_chunk
/// columns of 32 rows, each prefetching the next (the next columns of the same rows, else the first of
/// the next 32 rows). Stream: the codes with non-temporal stores where use_streaming_stores allows.
template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX512 inline void mxfp8_columnwise(const T* x, std::size_t M, std::size_t K, std::uint8_t* data,
                                                   std::uint8_t* scale, std::size_t scale_cols, bool stream) noexcept {
  const bool st = avx2::use_streaming_stores(stream, data, K);
  const auto rows = [st, K](const T* src, std::size_t w, std::uint8_t* dst, std::uint8_t* sc, const T* next, std::size_t nw) {
    if (st) mxfp8_columnwise_rows<D, true>(src, K, w, dst, sc, next, nw);
    else mxfp8_columnwise_rows<D, false>(src, K, w, dst, sc, next, nw);
  };
  avx2::for_each_column_chunk<mxfp8_columnwise_chunk>(x, M, K, data, scale, scale_cols, rows);
  if (st) avx2::stream_fence();
}

// ---- FP8 block scaling (1x128 and 128x128 tiles), fp32 and bf16 ----------------------------------
//
// The AVX2 block kernels spend 93 instructions per 32 bf16 (76 for fp32) in the cast and are bound by
// them. These cast with the encoder above (bf16: encode32; fp32: encode32f, 16 lanes per vector, the
// codes and sign bytes gathered by one vpermt2b each) and take the tile amaxes 16 lanes at a time
// (bf16: 16-bit keys, 32 per instruction; fp32: NaN-skipping float maxima). The scales are avx2's
// block_scales8 (the same IEEE operations); a tile whose scale is not finite and > 0 (value_for_inf
// inf or 0, or amax below eps with a huge eps) takes avx2::encode32. Chosen at run time for fp32 too,
// so the portable build (AVX2 baseline not assumed) gets them on AVX-512 CPUs.

/// Whether s is finite and > 0 (the AVX-512 encoders' condition).
inline bool encodable_scale(float s) noexcept { return s > 0.0f && s <= 3.40282347e38f; }

/// out[0..128) = fp8(p[0..128) * s): the AVX-512 encoders when s allows them (bf16 times a power of
/// two: encode32_pow2, without its inf test: a tile holding an inf has scale 1), else avx2::encode32.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX512_INLINE inline void tile_cast128(const T* p, float scale, bool ok, std::uint8_t* out) noexcept {
  const __m512 s = _mm512_set1_ps(scale);
  if constexpr (std::is_same_v<T, bf16>) {
    if (ok && pow2_multiplier(scale)) {
      const pow2_lanes c = pow2_constants<D>(scale);
      __mmask32 slow[4];
      for (int q = 0; q < 4; ++q) store32<Stream>(out + q * 32, encode32_pow2<D, false>(_mm512_loadu_si512(p + q * 32), c, slow[q]));
      if (_kor_mask32(_kor_mask32(slow[0], slow[1]), _kor_mask32(slow[2], slow[3])) == 0) return;
      __m512i unused = _mm512_setzero_si512();
      for (int q = 0; q < 4; ++q)
        if (slow[q]) store32<Stream>(out + q * 32, encode32<D, false>(_mm512_loadu_si512(p + q * 32), s, unused));
      return;
    }
  }
  if (ok) {
    __m512i unused = _mm512_setzero_si512();
    for (int q = 0; q < 4; ++q) {
      if constexpr (std::is_same_v<T, bf16>) {
        store32<Stream>(out + q * 32, encode32<D, false>(_mm512_loadu_si512(p + q * 32), s, unused));
      } else {
        store32<Stream>(out + q * 32, encode32f<D>(_mm512_loadu_ps(p + q * 32), _mm512_loadu_ps(p + q * 32 + 16), s));
      }
    }
  } else {
    for (int q = 0; q < 4; ++q) avx2::encode32<D, Stream>(p + q * 32, _mm256_set1_ps(scale), out + q * 32);
  }
}

/// max(m, the keys of the 128 elements at p), 16 lanes: bf16 16-bit keys (max_keys16, two lanes per
/// 32-bit lane), fp32 NaN-skipping float maxima (maxps returns its second operand on NaN) as bits.
template <class T>
TEQUANT_TARGET_AVX512_INLINE inline __m512i tile_keys128(const T* p, __m512i m) noexcept {
  if constexpr (std::is_same_v<T, bf16>) {
    const __m512i a = max_keys16(max_keys16(m, _mm512_loadu_si512(p)), _mm512_loadu_si512(p + 32));
    const __m512i b = max_keys16(max_keys16(_mm512_setzero_si512(), _mm512_loadu_si512(p + 64)), _mm512_loadu_si512(p + 96));
    return _mm512_max_epu16(a, b);
  } else {
    __m512 a = _mm512_castsi512_ps(m), b = _mm512_setzero_ps();
    for (int j = 0; j < 8; j += 2) {
      a = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(p + 16 * j)), a);
      b = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(p + 16 * j + 16)), b);
    }
    return _mm512_castps_si512(_mm512_max_ps(a, b));
  }
}

/// The amax key (32-bit, as avx2's) of tile_keys128's accumulator.
template <class T>
TEQUANT_TARGET_AVX512_INLINE inline std::uint32_t tile_key(__m512i m) noexcept {
  if constexpr (std::is_same_v<T, bf16>) return hmax_key16(m);
  else return _mm512_reduce_max_epu32(m);  // non-negative, non-NaN floats order as their bits
}

/// Lane b = the amax key of k[b] (eight tiles).
template <class T>
TEQUANT_TARGET_AVX512_INLINE inline __m256i tile_keys8(__m512i* k) noexcept {
  if constexpr (std::is_same_v<T, bf16>) return block_keys8(k);
  else return float_keys8(k);
}

template <class T>
TEQUANT_TARGET_AVX512_INLINE inline __m256i group_tile_keys8(const T* p) noexcept {
  __m512i k[8];
  for (int b = 0; b < 8; ++b) k[b] = tile_keys128(p + b * 128, _mm512_setzero_si512());
  return tile_keys8<T>(k);
}

/// avx2::block_rowwise_run with the AVX-512 amaxes and encoders, software-pipelined as
/// mxfp8_rowwise_run: the next group's eight tile amaxes are taken before this group is cast.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX512 inline void block_rowwise_run(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale_inv,
                                                    std::size_t scale_stride, bool pow2, float eps, float value_for_inf) noexcept {
  // Two groups ahead: the pipelined amax pass already reads the next group (measured native, load
  // 1.3, x memcpy: one group ahead 1.05 / 0.82 fp32 / bf16, two 1.29 / 0.95, four 1.01 / 0.97).
  constexpr std::size_t ahead = 2 * avx2::prefetch_ahead(8 * 128 * sizeof(T));
  const std::size_t groups = K / 1024, full = groups * 1024;
  for (std::size_t m = 0; m < M; ++m) {
    const T* src = x + m * K;
    std::uint8_t* dst = data + m * K;
    __m256i keys = groups ? group_tile_keys8(src) : _mm256_setzero_si256();
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t c0 = g * 1024;
      const T* p = src + c0;
      const __m256 s = avx2::block_scales8<D>(keys, pow2, eps, value_for_inf);
      alignas(32) float inv[8];
      _mm256_store_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), s));
      for (int b = 0; b < 8; ++b) scale_inv[(c0 / 128 + static_cast<std::size_t>(b)) * scale_stride + m] = inv[b];
      if (g + 1 < groups) keys = group_tile_keys8(p + 1024);
      const unsigned ok = static_cast<unsigned>(_mm256_movemask_ps(_mm256_and_ps(
          _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_cmp_ps(s, _mm256_set1_ps(3.40282347e38f), _CMP_LE_OQ))));
      alignas(32) float sv[8];
      _mm256_store_ps(sv, s);
      for (int b = 0; b < 8; ++b) {
        avx2::prefetch_bytes(p + b * 128 + ahead / sizeof(T), 128 * sizeof(T));
        tile_cast128<D, Stream>(p + b * 128, sv[b], (ok >> b) & 1u, dst + c0 + b * 128);
      }
    }
    for (std::size_t c0 = full; c0 < K; c0 += 128) {
      const std::size_t len = K - c0 < 128 ? K - c0 : 128;
      const float s = scale_from_amax(bits_float(avx2::amax(src + c0, len)), fp8_max(D), pow2, eps, value_for_inf);
      scale_inv[(c0 / 128) * scale_stride + m] = 1.0f / s;
      avx2::scale_encode<D>(src + c0, len, s, dst + c0, false);
    }
  }
}

template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX512 inline void block_rowwise(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale_inv,
                                                std::size_t scale_stride, bool pow2, float eps, float value_for_inf,
                                                bool stream) noexcept {
  if (avx2::use_streaming_stores(stream, data, K)) {
    block_rowwise_run<D, true>(x, M, K, data, scale_inv, scale_stride, pow2, eps, value_for_inf);
    avx2::stream_fence();
  } else {
    block_rowwise_run<D, false>(x, M, K, data, scale_inv, scale_stride, pow2, eps, value_for_inf);
  }
}

/// avx2::block_2d_row_amax with 16-lane keys.
template <class T>
TEQUANT_TARGET_AVX512_INLINE inline void block_2d_row_amax(const T* p, std::size_t K, __m512i* keys, std::uint32_t& tail) noexcept {
  const std::size_t full = K / 128;
  for (std::size_t kb = 0; kb < full; ++kb) keys[kb] = tile_keys128(p + kb * 128, keys[kb]);
  if (full * 128 < K) {
    const std::uint32_t k = avx2::amax(p + full * 128, K - full * 128);
    tail = k > tail ? k : tail;
  }
}

/// avx2::block_2d_row_cast with the AVX-512 encoders (ok[kb]: scale[kb] finite and > 0). Before the
/// cast of each full tile kb < next_tiles, the lines of tile kb at next are prefetched into L1.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX512_INLINE inline void block_2d_row_cast(const T* p, std::size_t K, const float* scale, const bool* ok,
                                                           std::uint8_t* out, const T* next = nullptr,
                                                           std::size_t next_tiles = 0) noexcept {
  const std::size_t full = K / 128;
  for (std::size_t kb = 0; kb < full; ++kb) {
    if (kb < next_tiles) avx2::prefetch_bytes(next + kb * 128, 128 * sizeof(T));
    tile_cast128<D, Stream>(p + kb * 128, scale[kb], ok[kb], out + kb * 128);
  }
  if (full * 128 < K) avx2::scale_encode<D>(p + full * 128, K - full * 128, scale[full], out + full * 128, false);
}

/// avx2::block_2d_run with 16-lane keys: each row block's amaxes pipelined with the cast of the one
/// before in segments of 2 KiB of input, the amaxes of a segment of row m, then the cast of the same
/// columns of row m - 128, which prefetches into L1 the amax pass's input two segments on (in row
/// order, into the next rows past the end of this one). The cast computes for longer than the amax
/// pass reads, so without the prefetch the two took turns rather than overlapping; prefetching further
/// ahead, or a whole row at a time (16 KiB of fp32 at K = 4096), measured slower (docs/benchmarks.md,
/// "Block 128×128: fifth round").
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX512 inline void block_2d_run(const T* x, std::size_t M, std::size_t K, std::size_t ld, std::uint8_t* data,
                                               float* scale, std::size_t scale_ld, bool pow2, float eps, float value_for_inf) noexcept {
  constexpr std::size_t chunk = avx2::block_2d_chunk / 2;  // 64-byte keys: 8 KiB, as avx2's
  constexpr std::size_t seg = 2048 / sizeof(T), ahead = 2 * seg;
  static_assert(chunk % 128 == 0 && seg % 128 == 0);
  const std::size_t KB = (K + 127) / 128, full = K / 128, MB = (M + 127) / 128;
  __m512i keys[chunk / 128];
  bool ok[chunk / 128 + 1];
  for (std::size_t mb = 0; mb < MB; ++mb) {
    const std::size_t nr = M - mb * 128 < 128 ? M - mb * 128 : 128;
    const bool cast = data && mb;  // the row block before (always 128 rows), with its scales
    const float* sc = scale + (mb ? mb - 1 : 0) * scale_ld;
    for (std::size_t kb = 0; kb < KB; ++kb) keys[kb] = _mm512_setzero_si512();
    std::uint32_t tail = 0;
    for (std::size_t r = 0; r < nr; ++r) {
      const std::size_t m = mb * 128 + r;
      if (!cast) {
        block_2d_row_amax(x + m * ld, K, keys, tail);
        continue;
      }
      for (std::size_t c = 0; c < K; c += seg) {
        const std::size_t w = K - c < seg ? K - c : seg;  // a multiple of 128 but in the last segment
        block_2d_row_amax(x + m * ld + c, w, keys + c / 128, tail);
        const std::size_t pm = m + (c + ahead) / K, pc = (c + ahead) % K;  // the amax pass, ahead
        const std::size_t pw = pm < M ? (K - pc < seg ? K - pc : seg) : 0;
        block_2d_row_cast<D, Stream>(x + (m - 128) * ld + c, w, sc + c / 128, ok + c / 128, data + (m - 128) * ld + c,
                                     pw ? x + pm * ld + pc : nullptr, pw / 128);
      }
    }
    if (cast)
      for (std::size_t r = nr; r < 128; ++r)
        block_2d_row_cast<D, Stream>(x + ((mb - 1) * 128 + r) * ld, K, sc, ok, data + ((mb - 1) * 128 + r) * ld);
    for (std::size_t kb = 0; kb < KB; ++kb) {
      const float s = scale_from_amax(bits_float(kb < full ? tile_key<T>(keys[kb]) : tail), fp8_max(D), pow2, eps, value_for_inf);
      scale[mb * scale_ld + kb] = s;
      ok[kb] = encodable_scale(s);
    }
  }
  if (data && MB)  // the last row block: nothing left to read ahead
    for (std::size_t m = (MB - 1) * 128; m < M; ++m)
      block_2d_row_cast<D, Stream>(x + m * ld, K, scale + (MB - 1) * scale_ld, ok, data + m * ld);
}

/// stream is ignored: ordinary stores measured faster than streaming ones for this kernel (fp32 and
/// bf16, 64 MiB inputs: docs/benchmarks.md, "Block 128×128: fifth round"); avx2::block_2d streams
/// where it allows.
template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX512 inline void block_2d(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale, bool pow2,
                                           float eps, float value_for_inf, bool /*stream*/) noexcept {
  constexpr std::size_t chunk = avx2::block_2d_chunk / 2;
  const std::size_t KB = (K + 127) / 128;
  for (std::size_t c0 = 0; c0 < K; c0 += chunk) {
    const std::size_t w = K - c0 < chunk ? K - c0 : chunk;
    block_2d_run<D, false>(x + c0, M, w, K, data ? data + c0 : nullptr, scale + c0 / 128, KB, pow2, eps, value_for_inf);
  }
}

}  // namespace avx512
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#  endif
#endif  // TEQUANT_HAS_X86_TARGET_ATTRIBUTES

}  // namespace tequant::detail
