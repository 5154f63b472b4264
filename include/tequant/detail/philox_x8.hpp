// SPDX-License-Identifier: Apache-2.0
// Eight Philox4x32-10 blocks at once on the host: one 32-bit lane per block in each of the four counter
// words. The AVX2 version (chosen at run time like host_simd.hpp's kernels) forms the 32x32->64-bit
// products with _mm256_mul_epu32 on the even and the odd lanes; it runs the scalar generator's integer
// operations, so its words are identical to philox4x32_10's on every target.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/detail/host_simd.hpp"
#include "tequant/detail/philox.hpp"

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
#  include <immintrin.h>
#endif

namespace tequant::detail {

/// Eight Philox blocks, lane-major: w[j][i] is word j of block i.
struct philox_lanes8 {
  std::uint32_t w[4][8];
};

/// Counters of eight consecutive groups of a stochastic-rounding stream: (offset + g + i) in words 0-1
/// of lane i, words 2-3 zero (philox_group's layout). The 64-bit sum carries into word 1.
inline philox_lanes8 philox_group_counters8(std::uint64_t offset, std::uint64_t g) noexcept {
  philox_lanes8 c{};
  for (int i = 0; i < 8; ++i) {
    const std::uint64_t v = offset + g + static_cast<std::uint64_t>(i);
    c.w[0][i] = static_cast<std::uint32_t>(v);
    c.w[1][i] = static_cast<std::uint32_t>(v >> 32);
  }
  return c;
}

/// The portable loop: philox4x32_10 per lane, lane i keyed by (k0[i], k1[i]).
inline philox_lanes8 philox4x32_10_x8_scalar(const philox_lanes8& ctr, const std::uint32_t* k0,
                                             const std::uint32_t* k1) noexcept {
  philox_lanes8 out{};
  for (int i = 0; i < 8; ++i) {
    const philox_counter r = philox4x32_10({ctr.w[0][i], ctr.w[1][i], ctr.w[2][i], ctr.w[3][i]}, {k0[i], k1[i]});
    for (int j = 0; j < 4; ++j) out.w[j][i] = r[static_cast<std::size_t>(j)];
  }
  return out;
}

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
namespace avx2 {

/// hi and lo 32 bits of m * a in every 32-bit lane. _mm256_mul_epu32 multiplies the low halves of the
/// 64-bit lanes (the even 32-bit lanes); shifting a right by 32 brings the odd lanes there.
TEQUANT_TARGET_AVX2_INLINE inline void mul_hi_lo(__m256i a, __m256i m, __m256i& hi, __m256i& lo) noexcept {
  const __m256i even = _mm256_mul_epu32(a, m);
  const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
  // the odd products' high words already sit in the odd lanes, their low words need shifting up
  hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
  lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

TEQUANT_TARGET_AVX2_INLINE inline __m256i load_u32x8(const std::uint32_t* p) noexcept {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

TEQUANT_TARGET_AVX2 inline philox_lanes8 philox4x32_10_x8(const philox_lanes8& ctr, const std::uint32_t* k0,
                                                          const std::uint32_t* k1) noexcept {
  __m256i c0 = load_u32x8(ctr.w[0]), c1 = load_u32x8(ctr.w[1]), c2 = load_u32x8(ctr.w[2]), c3 = load_u32x8(ctr.w[3]);
  __m256i key0 = load_u32x8(k0), key1 = load_u32x8(k1);
  const __m256i mul0 = _mm256_set1_epi32(static_cast<int>(0xD2511F53u));
  const __m256i mul1 = _mm256_set1_epi32(static_cast<int>(0xCD9E8D57u));
  const __m256i weyl0 = _mm256_set1_epi32(static_cast<int>(0x9E3779B9u));
  const __m256i weyl1 = _mm256_set1_epi32(static_cast<int>(0xBB67AE85u));
  for (int round = 0; round < 10; ++round) {
    if (round != 0) {
      key0 = _mm256_add_epi32(key0, weyl0);
      key1 = _mm256_add_epi32(key1, weyl1);
    }
    __m256i hi0, lo0, hi1, lo1;
    mul_hi_lo(c0, mul0, hi0, lo0);
    mul_hi_lo(c2, mul1, hi1, lo1);
    c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, c1), key0);
    c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, c3), key1);
    c1 = lo1;
    c3 = lo0;
  }
  philox_lanes8 out;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[0]), c0);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[1]), c1);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[2]), c2);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.w[3]), c3);
  return out;
}

}  // namespace avx2
#endif

/// Eight Philox4x32-10 blocks, lane i keyed by (k0[i], k1[i]) (dispatched).
inline philox_lanes8 philox4x32_10_x8(const philox_lanes8& ctr, const std::uint32_t* k0,
                                      const std::uint32_t* k1) noexcept {
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (host_has_avx2()) return avx2::philox4x32_10_x8(ctr, k0, k1);
#endif
  return philox4x32_10_x8_scalar(ctr, k0, k1);
}

/// philox_group(seed, offset, g + i) for i = 0..7, as lanes: w[j][i] is word j of group g + i.
inline philox_lanes8 philox_groups8(std::uint64_t seed, std::uint64_t offset, std::uint64_t g) noexcept {
  std::uint32_t k0[8], k1[8];
  for (int i = 0; i < 8; ++i) {
    k0[i] = static_cast<std::uint32_t>(seed);
    k1[i] = static_cast<std::uint32_t>(seed >> 32);
  }
  return philox4x32_10_x8(philox_group_counters8(offset, g), k0, k1);
}

}  // namespace tequant::detail
