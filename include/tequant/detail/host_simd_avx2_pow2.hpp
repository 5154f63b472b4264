// SPDX-License-Identifier: Apache-2.0
// bf16 times a power of two in 16-bit lanes (AVX2): the FP8 code from the bf16 bits, without widening
// to floats. Used by the AVX2 MXFP8 and power-of-two block-scaling casts of bf16; its multiplier
// constants are shared with the AVX-512 form (host_simd_avx512.hpp).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/detail/host_simd_scalar.hpp"  // fp8_traits, bf16

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
#  include <immintrin.h>
#endif

namespace tequant::detail {

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
namespace avx2 {

// MXFP8's multipliers (and block scaling's with power-of-two scales) are powers of two, and x * 2^j
// is exact while it stays a normal float, so the FP8 code follows from x's bits alone: the sign-cleared
// pattern plus (j + bias - 127) << 7 is the product's FP8 exponent and mantissa, and shifting it right
// by 7 - mant with ties to even (a carry into the exponent included) and clamping to the largest finite
// code gives what the float encoder gives for x * 2^j. Lanes whose product is below FP8's smallest
// normal (or that are bf16 subnormals) are reported, not cast: the caller casts their 32 elements with
// the float encoder (a block rarely has one: it needs |x| below about 2^-15 of the block amax for
// E4M3, 2^-31 for E5M2). On 16 lanes per vector that is 19 instructions per 16 elements, where the
// float encoder takes 2 widening unpacks, 2 multiplies and 2 x 15 for the same 16.

/// Whether s is a power of two the 16-bit-lane encoders take (a normal float with a zero mantissa, > 0).
inline bool pow2_multiplier(float s) noexcept {
  std::uint32_t b = 0;
  __builtin_memcpy(&b, &s, 4);
  return (b & 0x807FFFFFu) == 0 && b - 0x00800000u < 0x7F000000u;
}

/// The constants of the 16-bit-lane encoders for multipliers 2^j given as float bits (normal, > 0),
/// in 32-bit lanes: add = ((j + bias - 127) << 7) + the rounding half minus one; lo = the smallest
/// sign-cleared pattern whose product is an FP8 normal (at least 0x80, the smallest normal bf16).
template <fp8_dtype D>
TEQUANT_TARGET_AVX2_INLINE inline void pow2_constants8(__m256i mult_bits, __m256i& add, __m256i& lo) noexcept {
  using tr = fp8_traits<D>;
  // j + bias - 127 = (biased exponent of 2^j) + bias - 254, times 2^7 (bf16's mantissa width).
  const __m256i d = _mm256_slli_epi32(_mm256_add_epi32(_mm256_srli_epi32(mult_bits, 23), _mm256_set1_epi32(tr::bias - 254)), 7);
  add = _mm256_add_epi32(d, _mm256_set1_epi32((1 << (6 - tr::mant)) - 1));
  lo = _mm256_max_epi32(_mm256_sub_epi32(_mm256_set1_epi32(0x80), d), _mm256_set1_epi32(0x80));
}

/// Per-lane constants of encode32_pow2 for 16 consecutive elements (or one multiplier broadcast).
/// Every value fits in int16: add is in [-31481, 1935], lo in [0x80, 0x7B80].
struct pow2_words {
  __m256i add;   ///< pow2_constants8's add
  __m256i lo;    ///< pow2_constants8's lo
  __m256i slow;  ///< lo + 0x7FFF (mod 2^16): the lanes in [1, lo) are those whose |x| + 0x7FFF is below it, signed
};

/// Eight 32-bit lanes of each of two vectors as 16 words in order (the values fit in int16).
TEQUANT_TARGET_AVX2_INLINE inline __m256i words16(__m256i a, __m256i b) noexcept {
  return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
}

/// The constants of 16 lanes whose multipliers (float bits) are m0 (lanes 0-7) and m1 (lanes 8-15).
template <fp8_dtype D>
TEQUANT_TARGET_AVX2_INLINE inline pow2_words pow2_words16(__m256i m0, __m256i m1) noexcept {
  __m256i a0, l0, a1, l1;
  pow2_constants8<D>(m0, a0, l0);
  pow2_constants8<D>(m1, a1, l1);
  const __m256i lo = words16(l0, l1);
  return {words16(a0, a1), lo, _mm256_add_epi16(lo, _mm256_set1_epi16(0x7FFF))};
}

/// The constants of one multiplier 2^j (float, pow2_multiplier), broadcast to 16 lanes.
template <fp8_dtype D>
TEQUANT_TARGET_AVX2_INLINE inline pow2_words pow2_words_of(float mult) noexcept {
  const __m256i m = _mm256_castps_si256(_mm256_set1_ps(mult));
  return pow2_words16<D>(m, m);
}

/// The constants of one multiplier, each as its 16-bit value twice in 32 bits, so that a 32-bit
/// broadcast from memory (a load, no shuffle) gives the 16-bit lanes.
struct pow2_pairs {
  std::int32_t add, lo, slow;

  TEQUANT_TARGET_AVX2_INLINE pow2_words words() const noexcept {
    return {_mm256_set1_epi32(add), _mm256_set1_epi32(lo), _mm256_set1_epi32(slow)};
  }
};

/// The 16-bit lanes of 32-bit values v, twice in each 32-bit lane.
TEQUANT_TARGET_AVX2_INLINE inline __m256i pairs8(__m256i v) noexcept {
  const __m256i low = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF));
  return _mm256_or_si256(low, _mm256_slli_epi32(low, 16));
}

/// The pairs of eight multipliers (one per block of a group; lanes that are not powers of two get
/// unused values): computed 8-wide once per group instead of once per block.
template <fp8_dtype D>
TEQUANT_TARGET_AVX2_INLINE inline void pow2_pairs8(__m256 mult, pow2_pairs* out) noexcept {
  __m256i a, l;
  pow2_constants8<D>(_mm256_castps_si256(mult), a, l);
  alignas(32) std::int32_t v[3][8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(v[0]), pairs8(a));
  _mm256_store_si256(reinterpret_cast<__m256i*>(v[1]), pairs8(l));
  _mm256_store_si256(reinterpret_cast<__m256i*>(v[2]), pairs8(_mm256_add_epi32(l, _mm256_set1_epi32(0x7FFF))));
  for (int b = 0; b < 8; ++b) out[b] = {v[0][b], v[1][b], v[2][b]};
}

/// From 2^-112 on, +-inf times 2^j gets its saturated code without the inf test of the encoders below:
/// inf's exponent field read as a number, 255 + j - 127 + bias, already lands above the largest finite
/// code (E4M3 from j = -119, E5M2 from j = -112). Below, the test is what saturates it.
inline constexpr int pow2_inf_saturates_from = -112;

/// The codes of 16 bf16 (a) times 2^j as 16-bit lanes in [0, 255]; slow |= -1 in the lanes it does not
/// cast (nonzero, below c.lo: their codes are undefined). Inf = false: the caller knows no +-inf lane
/// meets a j below pow2_inf_saturates_from (MXFP8: a block holding one has code 254, which takes the
/// float encoder; block scaling: a tile holding one has scale 1), and the codes of such lanes are
/// undefined; it saves the inf test and blend, 2 of 19 instructions per 16 elements.
template <fp8_dtype D, bool Inf = true>
TEQUANT_TARGET_AVX2_INLINE inline __m256i encode16_pow2(__m256i a, const pow2_words& c, __m256i& slow) noexcept {
  using tr = fp8_traits<D>;
  constexpr int sh = 7 - tr::mant;
  const __m256i abs = _mm256_and_si256(a, _mm256_set1_epi16(0x7FFF));
  const __m256i small = _mm256_cmpgt_epi16(c.lo, abs);  // zeros included (lo >= 0x80)
  slow = _mm256_or_si256(slow, _mm256_cmpgt_epi16(c.slow, _mm256_add_epi16(abs, _mm256_set1_epi16(0x7FFF))));
  // Ties to even: the rounding half minus one (in c.add), plus one where the kept part is odd. No lane
  // that is not small wraps: abs + add + 1 is in [0x80, 0x8790).
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi16(abs, sh), _mm256_set1_epi16(1));
  const __m256i t = _mm256_add_epi16(_mm256_add_epi16(abs, c.add), odd);
  const __m256i max_code = _mm256_set1_epi16(static_cast<short>(tr::max_code));
  __m256i code = _mm256_andnot_si256(small, _mm256_min_epu16(_mm256_srli_epi16(t, sh), max_code));
  // inf * 2^j is inf, which saturates (its exponent field read as a number would not, for j < 0).
  if constexpr (Inf) code = _mm256_blendv_epi8(code, max_code, _mm256_cmpeq_epi16(abs, _mm256_set1_epi16(0x7F80)));
  code = _mm256_or_si256(code, _mm256_and_si256(_mm256_srli_epi16(a, 8), _mm256_set1_epi16(0x80)));
  return _mm256_blendv_epi8(code, _mm256_set1_epi16(0x7F), _mm256_cmpgt_epi16(abs, _mm256_set1_epi16(0x7F80)));  // NaN
}

/// The 32 codes of the bf16 at p times 2^j (c0: the constants of elements 0-15, c1: of 16-31), in
/// order, into out; slow and Inf as encode16_pow2's (the caller casts these 32 again with the float
/// encoder where slow is nonzero).
template <fp8_dtype D, bool Inf = true>
TEQUANT_TARGET_AVX2_INLINE inline __m256i encode32_pow2(const bf16* p, const pow2_words& c0, const pow2_words& c1,
                                                        __m256i& slow) noexcept {
  const __m256i r0 = encode16_pow2<D, Inf>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), c0, slow);
  const __m256i r1 = encode16_pow2<D, Inf>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16)), c1, slow);
  return _mm256_permute4x64_epi64(_mm256_packus_epi16(r0, r1), 0xD8);
}

}  // namespace avx2
#endif  // TEQUANT_HAS_X86_TARGET_ATTRIBUTES

}  // namespace tequant::detail
