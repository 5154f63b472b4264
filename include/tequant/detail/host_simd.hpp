// SPDX-License-Identifier: Apache-2.0
// Host inner loops: |x| max and x*scale -> FP8, bit-exact with format/fp8.hpp.
//
// GCC 12 does not vectorise a float max reduction without finite-math flags (which would break the
// NaN/inf rules), nor the branchy FP8 encoder. The AVX2 path below is compiled when the translation
// unit targets AVX2 (-mavx2 / -march=...); every other target gets the portable scalar loops, whose
// amax uses an integer max over sign-cleared bit patterns with NaN mapped to 0 (clang vectorises it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tequant/format/bits.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/half.hpp"

#if defined(__AVX2__)
#  include <immintrin.h>
#  define TEQUANT_HOST_AVX2 1
#else
#  define TEQUANT_HOST_AVX2 0
#endif

namespace tequant::detail {

/// Widening load of one element (exact for every input type).
template <class T>
inline float widen(const T& v) noexcept { return to_float(v); }

/// Sign-cleared bit pattern, NaN -> 0: an unsigned max of these is the bits of fmax(0, |x|...).
inline std::uint32_t amax_key(float f) noexcept {
  const std::uint32_t a = float_bits(f) & 0x7FFFFFFFu;
  return a > 0x7F800000u ? 0u : a;
}

template <class T>
inline std::uint32_t amax_bits_scalar(const T* x, std::size_t n) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t k = amax_key(widen(x[i]));
    m = k > m ? k : m;
  }
  return m;
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

#if TEQUANT_HOST_AVX2

template <class T>
inline __m256 load8(const T* p) noexcept;
template <>
inline __m256 load8<float>(const float* p) noexcept { return _mm256_loadu_ps(p); }
template <>
inline __m256 load8<bf16>(const bf16* p) noexcept {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#  if defined(__F16C__)
template <>
inline __m256 load8<fp16>(const fp16* p) noexcept {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
#    define TEQUANT_HOST_F16C 1
#  endif

template <class T>
inline constexpr bool avx2_input = std::is_same_v<T, float> || std::is_same_v<T, bf16>
#  if defined(TEQUANT_HOST_F16C)
                                   || std::is_same_v<T, fp16>
#  endif
    ;

/// amax keys of 8 lanes (sign cleared, NaN -> 0) as int32; all values are in [0, 0x7F800000].
inline __m256i amax_key8(__m256 v) noexcept {
  const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
  return _mm256_andnot_si256(nan, a);
}

inline std::uint32_t hmax_epi32(__m256i m) noexcept {
  __m128i r = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  r = _mm_max_epi32(r, _mm_shuffle_epi32(r, 0x4E));
  r = _mm_max_epi32(r, _mm_shuffle_epi32(r, 0xB1));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(r));
}

/// Branch-free x -> FP8 code for 8 lanes, as int32 in [0, 255]. Normal targets: integer RNE on the
/// rebased bits; subnormal targets: |y| * 2^(bias+mant-1) is exact and cvtps rounds to nearest even
/// (rounding up to 2^mant gives the smallest normal code, which is the right answer).
template <fp8_dtype D>
inline __m256i encode8(__m256 y) noexcept {
  using tr = fp8_traits<D>;
  constexpr int drop = 23 - tr::mant;
  constexpr std::uint32_t max_exp = (tr::max_code >> tr::mant) - tr::bias + 127;
  constexpr std::uint32_t max_bits = (max_exp << 23) | ((tr::max_code & ((1u << tr::mant) - 1)) << drop);
  constexpr std::uint32_t min_normal_bits = static_cast<std::uint32_t>(127 - tr::bias + 1) << 23;
  const __m256i u = _mm256_castps_si256(y);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i rebased = _mm256_sub_epi32(a, _mm256_set1_epi32(static_cast<int>((127u - tr::bias) << 23)));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(rebased, drop), _mm256_set1_epi32(1));
  const __m256i normal = _mm256_srli_epi32(
      _mm256_add_epi32(_mm256_add_epi32(rebased, _mm256_set1_epi32((1 << (drop - 1)) - 1)), odd), drop);
  const __m256 mag = _mm256_castsi256_ps(a);
  const __m256i sub = _mm256_cvtps_epi32(
      _mm256_mul_ps(mag, _mm256_castsi256_ps(_mm256_set1_epi32((127 + tr::bias + tr::mant - 1) << 23))));
  // a < min_normal_bits  <=>  min_normal_bits > a  (all values non-negative as int32)
  const __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(min_normal_bits)), a);
  __m256i code = _mm256_blendv_epi8(normal, sub, is_sub);
  const __m256i sat = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(static_cast<int>(max_bits - 1)));
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(static_cast<int>(tr::max_code)), sat);
  code = _mm256_or_si256(code, sign);
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), nan);
}

/// Packs 32 int32 codes (four vectors, in order) into 32 bytes.
inline void store32(std::uint8_t* out, __m256i c0, __m256i c1, __m256i c2, __m256i c3) noexcept {
  const __m256i p01 = _mm256_packus_epi32(c0, c1);  // lanes interleaved by 128-bit halves
  const __m256i p23 = _mm256_packus_epi32(c2, c3);
  const __m256i b = _mm256_packus_epi16(p01, p23);
  const __m256i fixed = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), fixed);
}

#endif  // TEQUANT_HOST_AVX2

/// max over |x| of the non-NaN values, as float bits (>= 0).
template <class T>
inline float amax_host(const T* x, std::size_t n) noexcept {
  std::size_t i = 0;
  std::uint32_t m = 0;
#if TEQUANT_HOST_AVX2
  if constexpr (avx2_input<T>) {
    __m256i m0 = _mm256_setzero_si256(), m1 = m0, m2 = m0, m3 = m0;
    for (; i + 32 <= n; i += 32) {
      m0 = _mm256_max_epi32(m0, amax_key8(load8(x + i)));
      m1 = _mm256_max_epi32(m1, amax_key8(load8(x + i + 8)));
      m2 = _mm256_max_epi32(m2, amax_key8(load8(x + i + 16)));
      m3 = _mm256_max_epi32(m3, amax_key8(load8(x + i + 24)));
    }
    m = hmax_epi32(_mm256_max_epi32(_mm256_max_epi32(m0, m1), _mm256_max_epi32(m2, m3)));
  }
#endif
  const std::uint32_t t = amax_bits_scalar(x + i, n - i);
  return bits_float(t > m ? t : m);
}

/// out[i] = fp8(x[i] * scale); when `amax_bits` is non-null, also max-accumulates amax keys of x
/// (one read of x for delayed scaling's cast + amax).
template <fp8_dtype D, class T>
inline void scale_encode_host(const T* x, std::size_t n, float scale, std::uint8_t* out, std::uint32_t* amax_bits) noexcept {
  std::size_t i = 0;
  std::uint32_t m = 0;
#if TEQUANT_HOST_AVX2
  if constexpr (avx2_input<T>) {
    const __m256 s = _mm256_set1_ps(scale);
    __m256i mk = _mm256_setzero_si256();
    for (; i + 32 <= n; i += 32) {
      const __m256 v0 = load8(x + i), v1 = load8(x + i + 8), v2 = load8(x + i + 16), v3 = load8(x + i + 24);
      if (amax_bits) {
        mk = _mm256_max_epi32(mk, _mm256_max_epi32(_mm256_max_epi32(amax_key8(v0), amax_key8(v1)),
                                                   _mm256_max_epi32(amax_key8(v2), amax_key8(v3))));
      }
      store32(out + i, encode8<D>(_mm256_mul_ps(v0, s)), encode8<D>(_mm256_mul_ps(v1, s)),
              encode8<D>(_mm256_mul_ps(v2, s)), encode8<D>(_mm256_mul_ps(v3, s)));
    }
    m = hmax_epi32(mk);
  }
#endif
  // Tail (and the whole range without AVX2); indexed from the tail start, which also keeps GCC's
  // -O3 loop analysis from warning about the vector loop's bound.
  const T* xt = x + i;
  std::uint8_t* ot = out + i;
  const std::size_t rest = n - i;
  for (std::size_t t = 0; t < rest; ++t) {
    const float v = widen(xt[t]);
    if (amax_bits) {
      const std::uint32_t k = amax_key(v);
      m = k > m ? k : m;
    }
    ot[t] = fp8_traits<D>::encode(v * scale);
  }
  if (amax_bits && m > *amax_bits) *amax_bits = m;
}

/// out[i] = fp8(x[i] * scale[i]) (per-element multipliers: columnwise blocks).
template <fp8_dtype D, class T>
inline void scale_encode_each_host(const T* x, std::size_t n, const float* scale, std::uint8_t* out) noexcept {
  std::size_t i = 0;
#if TEQUANT_HOST_AVX2
  if constexpr (avx2_input<T>) {
    for (; i + 32 <= n; i += 32) {
      store32(out + i, encode8<D>(_mm256_mul_ps(load8(x + i), _mm256_loadu_ps(scale + i))),
              encode8<D>(_mm256_mul_ps(load8(x + i + 8), _mm256_loadu_ps(scale + i + 8))),
              encode8<D>(_mm256_mul_ps(load8(x + i + 16), _mm256_loadu_ps(scale + i + 16))),
              encode8<D>(_mm256_mul_ps(load8(x + i + 24), _mm256_loadu_ps(scale + i + 24))));
    }
  }
#endif
  const std::size_t rest = n - i;
  for (std::size_t t = 0; t < rest; ++t) out[i + t] = fp8_traits<D>::encode(widen(x[i + t]) * scale[i + t]);
}

/// colmax[k] = max(colmax[k], amax key of x[k]) for one row (columnwise block amax).
template <class T>
inline void column_amax_host(const T* x, std::size_t n, std::uint32_t* colmax) noexcept {
  std::size_t i = 0;
#if TEQUANT_HOST_AVX2
  if constexpr (avx2_input<T>) {
    for (; i + 8 <= n; i += 8) {
      __m256i* c = reinterpret_cast<__m256i*>(colmax + i);
      _mm256_storeu_si256(c, _mm256_max_epi32(_mm256_loadu_si256(c), amax_key8(load8(x + i))));
    }
  }
#endif
  for (; i < n; ++i) {
    const std::uint32_t k = amax_key(widen(x[i]));
    colmax[i] = k > colmax[i] ? k : colmax[i];
  }
}

}  // namespace tequant::detail
