// SPDX-License-Identifier: Apache-2.0
// The AVX-512 bf16 host kernels and the MXFP8 columnwise kernel of fp32 and bf16 (x86 with g++/clang,
// chosen at run time by host_simd.hpp); the cases the bf16 casts leave (scales that are not finite
// and > 0, rowwise MXFP8 blocks with code 254) go to the AVX2 ones.
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
  for (; i + 32 <= n; i += 32)
    store32<Stream, true>(out + i, encode32<D, Amax>(_mm512_loadu_si512(x + i), s, m));
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
TEQUANT_TARGET_AVX512 inline std::uint32_t scale_encode(const bf16* x, std::size_t n, float scale, std::uint8_t* out,
                                                        bool with_amax) noexcept {
  if (!(scale > 0.0f && scale <= 3.40282347e38f)) return avx2::scale_encode<D>(x, n, scale, out, with_amax);
  std::size_t i = 0;
  const __m512 s = _mm512_set1_ps(scale);
  std::uint32_t m = 0;
  if (n >= streaming_store_min_bytes) {
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

/// avx2::mxfp8_rowwise_run for bf16: eight blocks' amaxes, their codes and multipliers 8-wide, each
/// block cast from L1. Software-pipelined: the next group's amaxes are computed before this group is
/// cast (they do not depend on it), so the out-of-order core overlaps the reduction with the cast
/// instead of waiting on its dependency chain (measured from L2: 0.200 -> 0.185 ns per element).
template <fp8_dtype D, bool Stream>
TEQUANT_TARGET_AVX512 inline void mxfp8_rowwise_run(const bf16* x, std::size_t M, std::size_t K, std::uint8_t* data,
                                                    std::uint8_t* scale, std::size_t scale_cols) noexcept {
  constexpr std::size_t ahead = avx2::prefetch_ahead(8 * 32 * sizeof(bf16));
  const std::size_t KB = K / 32, groups = KB / 8;
  for (std::size_t m = 0; m < M; ++m) {
    const bf16* src = x + m * K;
    std::uint8_t* dst = data + m * K;
    std::uint8_t* sc = scale + m * scale_cols;
    __m256i keys = groups ? group_keys8(src) : _mm256_setzero_si256();
    for (std::size_t g = 0; g < groups; ++g) {
      const std::size_t kb = g * 8;
      const bf16* p = src + kb * 32;
      const __m256i e = avx2::e8m0_codes8<D>(keys);
      avx2::store8_bytes(sc + kb, e);
      const __m256 mult = avx2::e8m0_multipliers8(e);
      if (g + 1 < groups) keys = group_keys8(p + 256);
      // Code 254 (an inf or overflowing block) has multiplier 0, where inf * 0 is NaN: the AVX2 cast.
      const unsigned zero_mult = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(e, _mm256_set1_epi32(254)))));
      const __m512 mult16 = _mm512_castps256_ps512(mult);
      __m512i unused = _mm512_setzero_si512();
      if (zero_mult == 0) {  // the common case, unrolled: no branches, constants kept in registers
#  if !defined(__CUDACC__)  // nvcc's front end does not know the pragma (its own unroll is for device code)
#    pragma GCC unroll 8
#  endif
        for (int b = 0; b < 8; ++b) {
          avx2::prefetch_bytes(p + b * 32 + ahead / sizeof(bf16), 32 * sizeof(bf16));
          const __m512 sb = _mm512_permutexvar_ps(_mm512_set1_epi32(b), mult16);
          store32<Stream>(dst + kb * 32 + b * 32, encode32<D, false>(_mm512_loadu_si512(p + b * 32), sb, unused));
        }
      } else {
        for (int b = 0; b < 8; ++b) {
          avx2::prefetch_bytes(p + b * 32 + ahead / sizeof(bf16), 32 * sizeof(bf16));
          if ((zero_mult >> b) & 1u) {
            avx2::encode32<D, Stream>(p + b * 32, avx2::lane(mult, b), dst + kb * 32 + b * 32);
          } else {
            const __m512 sb = _mm512_permutexvar_ps(_mm512_set1_epi32(b), mult16);
            store32<Stream>(dst + kb * 32 + b * 32, encode32<D, false>(_mm512_loadu_si512(p + b * 32), sb, unused));
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

template <fp8_dtype D>
TEQUANT_TARGET_AVX512 inline void mxfp8_rowwise(const bf16* x, std::size_t M, std::size_t K, std::uint8_t* data,
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
/// waits for memory in its amax pass and for the FPU in its cast pass, in turns). The avx2 kernel's
/// 256-byte column groups (the amax, then the cast of the same group) reread lines that the 32 rows,
/// a multiple of 4 KiB apart, evict from L1 (they share its sets). docs/benchmarks.md has the figures.
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
/// encode32 and each 32 columns' multipliers split into the even and the odd columns (encode32's
/// lanes). encode32 needs multipliers > 0; a 32-column chunk with code 254 (an inf or overflowing
/// block: multiplier 0, where inf * 0 is NaN) is cast with encode16 on the widened halves.
template <fp8_dtype D, bool Stream>
TEQUANT_TARGET_AVX512 inline void mxfp8_columnwise_rows(const bf16* x, std::size_t K, std::size_t W, std::uint8_t* data,
                                                        std::uint8_t* scale, const bf16* next, std::size_t next_w) noexcept {
  constexpr std::size_t N = mxfp8_columnwise_chunk;
  alignas(64) std::uint16_t keys[N];
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
    if (!any_zero) {
      for (std::size_t c = 0; c < W; c += 32) {
        if (c < next_w) _mm_prefetch(pf + c * 2, _MM_HINT_T1);
        store32<Stream>(out + c,
                        encode32<D, false>(_mm512_loadu_si512(p + c), _mm512_load_ps(mult + c), _mm512_load_ps(mult + c + 16), unused));
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
  constexpr std::size_t N = mxfp8_columnwise_chunk;
  for (std::size_t m0 = 0; m0 < M; m0 += 32) {
    for (std::size_t c0 = 0; c0 < K; c0 += N) {
      const std::size_t w = K - c0 < N ? K - c0 : N;
      const T* next = nullptr;
      std::size_t nw = 0;
      if (c0 + w < K) {
        next = x + m0 * K + c0 + w;
        nw = K - c0 - w < N ? K - c0 - w : N;
      } else if (m0 + 32 < M) {
        next = x + (m0 + 32) * K;
        nw = K < N ? K : N;
      }
      const T* src = x + m0 * K + c0;
      std::uint8_t* dst = data + m0 * K + c0;
      std::uint8_t* sc = scale + m0 / 32 * scale_cols + c0;
      if (st) mxfp8_columnwise_rows<D, true>(src, K, w, dst, sc, next, nw);
      else mxfp8_columnwise_rows<D, false>(src, K, w, dst, sc, next, nw);
    }
  }
  if (st) avx2::stream_fence();
}

}  // namespace avx512
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#  endif
#endif  // TEQUANT_HAS_X86_TARGET_ATTRIBUTES

}  // namespace tequant::detail
