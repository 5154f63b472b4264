// SPDX-License-Identifier: Apache-2.0
// Host inner loops: |x| max and x*scale -> FP8, bit-exact with format/fp8.hpp.
//
// GCC 12 does not vectorise a float max reduction without finite-math flags (which would break the
// NaN/inf rules), nor the branchy FP8 encoder. So on x86 with g++/clang every kernel has an AVX2 + F16C
// version compiled with a target attribute (whatever flags the user's translation unit has) and chosen
// at run time by host_has_avx2(); every other target gets the portable scalar loops, whose amax uses an
// integer max over sign-cleared bit patterns with NaN mapped to 0 (clang vectorises it). Both versions
// produce the same bits: the vector code uses the same IEEE operations and integer encoders.
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

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
#  include <cpuid.h>
#  include <immintrin.h>
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

// ---- AVX2 + F16C (x86, chosen at run time) ---------------------------------------------------------

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
namespace avx2 {

template <class T>
inline constexpr bool input = std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

template <class T>
TEQUANT_TARGET_AVX2_INLINE inline __m256 load8(const T* p) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(p);
  } else if constexpr (std::is_same_v<T, bf16>) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    static_assert(std::is_same_v<T, fp16>);
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

/// Whether load32 returns the 32 elements in halves order: bf16 is widened by interleaving zeros
/// below each 16-bit pattern (one unpack per 8 elements instead of a zero-extension and a shift), which
/// works within 128-bit lanes: v[0] holds elements 0-3 and 8-11, v[1] 4-7 and 12-15, v[2] and v[3]
/// the same of 16-31. store32<_, true> puts the codes back in order; per-element operands (columnwise
/// multipliers) are permuted to match (halves_order).
template <class T>
inline constexpr bool halves = std::is_same_v<T, bf16>;

/// The 32 elements at p as four vectors of floats (in halves order for bf16).
template <class T>
TEQUANT_TARGET_AVX2_INLINE inline void load32(const T* p, __m256* v) noexcept {
  if constexpr (halves<T>) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
    const __m256i z = _mm256_setzero_si256();
    v[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, a));
    v[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, a));
    v[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, b));
    v[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, b));
  } else {
    for (int j = 0; j < 4; ++j) v[j] = load8(p + 8 * j);
  }
}

/// Per-element operands of 32 consecutive elements (four vectors in order) in load32's order for T.
template <class T>
TEQUANT_TARGET_AVX2_INLINE inline void halves_order(const __m256* m, __m256* out) noexcept {
  if constexpr (halves<T>) {
    out[0] = _mm256_permute2f128_ps(m[0], m[1], 0x20);
    out[1] = _mm256_permute2f128_ps(m[0], m[1], 0x31);
    out[2] = _mm256_permute2f128_ps(m[2], m[3], 0x20);
    out[3] = _mm256_permute2f128_ps(m[2], m[3], 0x31);
  } else {
    for (int j = 0; j < 4; ++j) out[j] = m[j];
  }
}

/// amax keys of 8 lanes (sign cleared, NaN -> 0) as int32; all values are in [0, 0x7F800000].
TEQUANT_TARGET_AVX2_INLINE inline __m256i amax_key8(__m256 v) noexcept {
  const __m256i a = _mm256_and_si256(_mm256_castps_si256(v), _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
  return _mm256_andnot_si256(nan, a);
}

/// 16-bit amax keys of the 16 bf16 at p: the key of a bf16 is its sign-cleared bits (<< 16 as a float
/// key), NaN (above 0x7F80) -> 0. Signed 16-bit max orders them like the values.
TEQUANT_TARGET_AVX2_INLINE inline __m256i bf16_keys16(const bf16* p) noexcept {
  const __m256i k = _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), _mm256_set1_epi16(0x7FFF));
  return _mm256_andnot_si256(_mm256_cmpgt_epi16(k, _mm256_set1_epi16(0x7F80)), k);
}

/// 8 lanes of amax keys whose max is the amax key of the 32 elements at p.
template <class T>
TEQUANT_TARGET_AVX2_INLINE inline __m256i keys32(const T* p) noexcept {
  if constexpr (std::is_same_v<T, bf16>) {
    // On the 16-bit patterns directly, widened to 32-bit keys at the end.
    const __m256i m = _mm256_max_epi16(bf16_keys16(p), bf16_keys16(p + 16));
    const __m256i m32 = _mm256_max_epi32(_mm256_and_si256(m, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(m, 16));
    return _mm256_slli_epi32(m32, 16);
  } else {
    return _mm256_max_epi32(_mm256_max_epi32(amax_key8(load8(p)), amax_key8(load8(p + 8))),
                            _mm256_max_epi32(amax_key8(load8(p + 16)), amax_key8(load8(p + 24))));
  }
}

TEQUANT_TARGET_AVX2_INLINE inline std::uint32_t hmax_epi32(__m256i m) noexcept {
  __m128i r = _mm_max_epi32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
  r = _mm_max_epi32(r, _mm_shuffle_epi32(r, 0x4E));
  r = _mm_max_epi32(r, _mm_shuffle_epi32(r, 0xB1));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(r));
}

/// Lane b of the result = max over the 8 lanes of m[b] (eight horizontal maxima in 21 instructions).
TEQUANT_TARGET_AVX2_INLINE inline __m256i transpose_max8(const __m256i* m) noexcept {
  const __m256i a01 = _mm256_max_epi32(_mm256_unpacklo_epi32(m[0], m[1]), _mm256_unpackhi_epi32(m[0], m[1]));
  const __m256i a23 = _mm256_max_epi32(_mm256_unpacklo_epi32(m[2], m[3]), _mm256_unpackhi_epi32(m[2], m[3]));
  const __m256i a45 = _mm256_max_epi32(_mm256_unpacklo_epi32(m[4], m[5]), _mm256_unpackhi_epi32(m[4], m[5]));
  const __m256i a67 = _mm256_max_epi32(_mm256_unpacklo_epi32(m[6], m[7]), _mm256_unpackhi_epi32(m[6], m[7]));
  const __m256i b03 = _mm256_max_epi32(_mm256_unpacklo_epi64(a01, a23), _mm256_unpackhi_epi64(a01, a23));
  const __m256i b47 = _mm256_max_epi32(_mm256_unpacklo_epi64(a45, a67), _mm256_unpackhi_epi64(a45, a67));
  return _mm256_max_epi32(_mm256_permute2x128_si256(b03, b47, 0x20), _mm256_permute2x128_si256(b03, b47, 0x31));
}

/// Branch-free x -> FP8 code for 8 lanes, as int32 in [0, 255]: RNE, saturating, every NaN -> 0x7F.
/// |y| (clamped to the largest finite value, which is what saturation rounds to) plus c = 2^(E + 23 -
/// mant), E = max(exponent of |y|, smallest normal exponent), is a float whose ulp is the FP8 step at
/// |y|, so the FPU's round-to-nearest-even does the rounding, subnormal targets included; bits(sum) -
/// bits(c) counts FP8 steps above c, and the code is that plus (E - emin) << mant. Checked against the
/// scalar encoders on all 2^32 inputs (tests/backend, label exhaustive).
template <fp8_dtype D>
TEQUANT_TARGET_AVX2_INLINE inline __m256i encode8(__m256 y) noexcept {
  using tr = fp8_traits<D>;
  constexpr int emin_biased = 127 + 1 - tr::bias;  // the smallest normal exponent, float-biased
  const __m256i u = _mm256_castps_si256(y);
  const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256 mag = _mm256_min_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(fp8_max(D)));  // NaN: fixed below
  const __m256i e = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(mag), _mm256_set1_epi32(0x7F800000)),
                                     _mm256_set1_epi32(emin_biased << 23));
  const __m256i c = _mm256_add_epi32(e, _mm256_set1_epi32((23 - tr::mant) << 23));
  const __m256i steps = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(mag, _mm256_castsi256_ps(c))), c);
  const __m256i base = _mm256_sub_epi32(_mm256_srli_epi32(e, 23 - tr::mant), _mm256_set1_epi32(emin_biased << tr::mant));
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i code = _mm256_or_si256(_mm256_add_epi32(steps, base), sign);
  const __m256i nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
  return _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), nan);
}

/// Packs 32 int32 codes (four vectors, in order) into 32 bytes. Stream: non-temporal stores (out must
/// be 16-byte aligned), for outputs too large to stay in cache: an ordinary store first reads the line
/// it writes (6/5 of the bytes moved for fp32 input, 4/3 for 16-bit), a streaming store does not.
/// Every kernel that streams ends with stream_fence().
template <bool Stream = false, bool Halves = false>
TEQUANT_TARGET_AVX2_INLINE inline void store32(std::uint8_t* out, __m256i c0, __m256i c1, __m256i c2, __m256i c3) noexcept {
  const __m256i p01 = _mm256_packus_epi32(c0, c1);  // lanes interleaved by 128-bit halves
  const __m256i p23 = _mm256_packus_epi32(c2, c3);
  const __m256i b = _mm256_packus_epi16(p01, p23);
  // In halves order (load32 of bf16) the packs leave 8-byte groups 0-7, 16-23, 8-15, 24-31.
  const __m256i fixed = Halves ? _mm256_permute4x64_epi64(b, 0xD8)
                               : _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  if constexpr (Stream) {
    // Two 16-byte halves: 32-byte alignment is not guaranteed (glibc's large blocks are 16 mod 32).
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(fixed));
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + 16), _mm256_extracti128_si256(fixed, 1));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), fixed);
  }
}

/// Orders the streaming stores before anything this thread writes next (a flag another thread or a
/// device reads, say): they are weakly ordered and would otherwise sit in write-combining buffers.
TEQUANT_TARGET_AVX2_INLINE inline void stream_fence() noexcept { _mm_sfence(); }

/// out[0..32) = fp8(x[0..32) * s).
template <fp8_dtype D, bool Stream = false, class T>
TEQUANT_TARGET_AVX2_INLINE inline void encode32(const T* x, __m256 s, std::uint8_t* out) noexcept {
  __m256 v[4];
  load32(x, v);
  store32<Stream, halves<T>>(out, encode8<D>(_mm256_mul_ps(v[0], s)), encode8<D>(_mm256_mul_ps(v[1], s)),
                             encode8<D>(_mm256_mul_ps(v[2], s)), encode8<D>(_mm256_mul_ps(v[3], s)));
}

/// Prefetches [p, p + bytes) into L1. The grouped kernels read a group twice (amax, then cast from L1);
/// without this the first read is a burst of loads with nothing to overlap the memory latency with.
TEQUANT_TARGET_AVX2_INLINE inline void prefetch_bytes(const void* p, std::size_t bytes) noexcept {
  for (std::size_t o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + o, _MM_HINT_T0);
}

/// How far ahead of the group being cast the next groups are prefetched: at least one group, and at
/// least 2 KiB (the bandwidth-latency product of one core, roughly).
inline constexpr std::size_t prefetch_ahead(std::size_t group_bytes) noexcept { return group_bytes < 2048 ? 2048 : group_bytes; }

/// Lane b of v broadcast to all lanes.
TEQUANT_TARGET_AVX2_INLINE inline __m256 lane(__m256 v, int b) noexcept { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(b)); }

template <class T>
TEQUANT_TARGET_AVX2 inline std::uint32_t amax(const T* x, std::size_t n) noexcept {
  std::size_t i = 0;
  __m256i m0 = _mm256_setzero_si256(), m1 = m0;
  for (; i + 64 <= n; i += 64) {
    m0 = _mm256_max_epi32(m0, keys32(x + i));
    m1 = _mm256_max_epi32(m1, keys32(x + i + 32));
  }
  if (i + 32 <= n) {
    m0 = _mm256_max_epi32(m0, keys32(x + i));
    i += 32;
  }
  const std::uint32_t m = hmax_epi32(_mm256_max_epi32(m0, m1));
  const std::uint32_t t = amax_bits_scalar(x + i, n - i);
  return t > m ? t : m;
}

/// Whether a kernel writing `bytes` of codes at `out` (and, for matrices, rows `row_bytes` apart)
/// streams: large enough, and every 32-byte group it stores 16-byte aligned.
inline bool use_streaming_stores(const void* out, std::size_t bytes, std::size_t row_bytes = 0) noexcept {
  return bytes >= streaming_store_min_bytes && reinterpret_cast<std::uintptr_t>(out) % 16 == 0 && row_bytes % 16 == 0;
}

/// The matrix kernels' form: `large` (the caller's whole output is at least streaming_store_min_bytes,
/// though one call may write one row block of it), and every 32-byte group 16-byte aligned.
inline bool use_streaming_stores(bool large, const void* out, std::size_t row_bytes) noexcept {
  return large && reinterpret_cast<std::uintptr_t>(out) % 16 == 0 && row_bytes % 16 == 0;
}

template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2 inline __m256i scale_encode_run(const T* x, std::size_t& i, std::size_t n, __m256 s, std::uint8_t* out,
                                                    bool with_amax) noexcept {
  __m256i mk = _mm256_setzero_si256();
  for (; i + 32 <= n; i += 32) {
    __m256 v[4];
    load32(x + i, v);
    const __m256 v0 = v[0], v1 = v[1], v2 = v[2], v3 = v[3];
    if (with_amax) {
      mk = _mm256_max_epi32(mk, _mm256_max_epi32(_mm256_max_epi32(amax_key8(v0), amax_key8(v1)),
                                                 _mm256_max_epi32(amax_key8(v2), amax_key8(v3))));
    }
    store32<Stream, halves<T>>(out + i, encode8<D>(_mm256_mul_ps(v0, s)), encode8<D>(_mm256_mul_ps(v1, s)),
                    encode8<D>(_mm256_mul_ps(v2, s)), encode8<D>(_mm256_mul_ps(v3, s)));
  }
  return mk;
}

template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX2 inline std::uint32_t scale_encode(const T* x, std::size_t n, float scale, std::uint8_t* out,
                                                      bool with_amax) noexcept {
  std::size_t i = 0;
  const __m256 s = _mm256_set1_ps(scale);
  std::uint32_t m = 0;
  if (n >= streaming_store_min_bytes) {
    // The few elements before the first 16-byte boundary of out go through the scalar loop.
    const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(out) % 16) % 16;
    m = scale_encode_scalar<D>(x, head, scale, out, with_amax);
    i = head;
    const std::uint32_t mv = hmax_epi32(scale_encode_run<D, true>(x, i, n, s, out, with_amax));
    stream_fence();
    m = mv > m ? mv : m;
  } else {
    m = hmax_epi32(scale_encode_run<D, false>(x, i, n, s, out, with_amax));
  }
  const std::uint32_t t = scale_encode_scalar<D>(x + i, n - i, scale, out + i, with_amax);
  return t > m ? t : m;
}

template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX2 inline void scale_encode_each(const T* x, std::size_t n, const float* scale, std::uint8_t* out) noexcept {
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    store32(out + i, encode8<D>(_mm256_mul_ps(load8(x + i), _mm256_loadu_ps(scale + i))),
            encode8<D>(_mm256_mul_ps(load8(x + i + 8), _mm256_loadu_ps(scale + i + 8))),
            encode8<D>(_mm256_mul_ps(load8(x + i + 16), _mm256_loadu_ps(scale + i + 16))),
            encode8<D>(_mm256_mul_ps(load8(x + i + 24), _mm256_loadu_ps(scale + i + 24))));
  }
  scale_encode_each_scalar<D>(x + i, n - i, scale + i, out + i);
}

template <class T>
TEQUANT_TARGET_AVX2 inline void column_amax(const T* x, std::size_t n, std::uint32_t* colmax) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i* c = reinterpret_cast<__m256i*>(colmax + i);
    _mm256_storeu_si256(c, _mm256_max_epi32(_mm256_loadu_si256(c), amax_key8(load8(x + i))));
  }
  column_amax_scalar(x + i, n - i, colmax + i);
}

/// encode_e8m0(bits_float(amax) * (1 / fp8_max)) for 8 lanes of non-NaN amax bits.
template <fp8_dtype D>
TEQUANT_TARGET_AVX2_INLINE inline __m256i e8m0_codes8(__m256i amax_bits) noexcept {
  constexpr float rcp = 1.0f / fp8_max(D);
  const __m256i a = _mm256_castps_si256(_mm256_mul_ps(_mm256_castsi256_ps(amax_bits), _mm256_set1_ps(rcp)));
  const __m256i e = _mm256_srli_epi32(a, 23);
  const __m256i mant = _mm256_and_si256(a, _mm256_set1_epi32(0x7FFFFF));
  // Round the exponent up when the mantissa is non-zero; exponent 0 (denormal) holds up to 2^-127.
  const __m256i thr = _mm256_and_si256(_mm256_cmpeq_epi32(e, _mm256_setzero_si256()), _mm256_set1_epi32(0x400000));
  const __m256i up = _mm256_cmpgt_epi32(mant, thr);  // -1 where the exponent rounds up
  return _mm256_min_epi32(_mm256_sub_epi32(e, up), _mm256_set1_epi32(0xFE));  // inf and overflow -> 254
}

/// e8m0_cast_multiplier for 8 codes in [0, 254]: (254 - e) << 23 is already 0 for code 254; code 0 -> 1.
TEQUANT_TARGET_AVX2_INLINE inline __m256 e8m0_multipliers8(__m256i e) noexcept {
  const __m256i m = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(254), e), 23);
  return _mm256_castsi256_ps(_mm256_blendv_epi8(m, _mm256_set1_epi32(0x3F800000), _mm256_cmpeq_epi32(e, _mm256_setzero_si256())));
}

/// Eight int32 values in [0, 255] -> eight bytes.
TEQUANT_TARGET_AVX2_INLINE inline void store8_bytes(std::uint8_t* out, __m256i v) noexcept {
  const __m128i w = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(out), _mm_packus_epi16(w, w));
}

// Eight blocks at a time: their amaxes land in one vector (no per-block horizontal reduction and no
// scalar scale code on the critical path), the scales are computed 8-wide, then each block is cast
// from L1 with its scale broadcast from that vector.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2 inline void mxfp8_rowwise_run(const T* x, std::size_t M, std::size_t K, std::uint8_t* data,
                                                  std::uint8_t* scale, std::size_t scale_cols) noexcept {
  constexpr std::size_t ahead = prefetch_ahead(8 * 32 * sizeof(T));
  const std::size_t KB = K / 32;
  for (std::size_t m = 0; m < M; ++m) {
    const T* src = x + m * K;
    std::uint8_t* dst = data + m * K;
    std::uint8_t* sc = scale + m * scale_cols;
    std::size_t kb = 0;
    for (; kb + 8 <= KB; kb += 8) {
      const T* p = src + kb * 32;
      __m256i bm[8];
      for (int b = 0; b < 8; ++b) bm[b] = keys32(p + b * 32);
      const __m256i e = e8m0_codes8<D>(transpose_max8(bm));
      store8_bytes(sc + kb, e);
      const __m256 mult = e8m0_multipliers8(e);
      for (int b = 0; b < 8; ++b) {
        prefetch_bytes(p + b * 32 + ahead / sizeof(T), 32 * sizeof(T));
        encode32<D, Stream>(p + b * 32, lane(mult, b), dst + kb * 32 + b * 32);
      }
    }
    for (; kb < KB; ++kb) {
      const std::uint8_t e = mxfp8_code<D>(hmax_epi32(keys32(src + kb * 32)));
      sc[kb] = e;
      encode32<D, Stream>(src + kb * 32, _mm256_set1_ps(e8m0_cast_multiplier(e)), dst + kb * 32);
    }
  }
}

template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX2 inline void mxfp8_rowwise(const T* x, std::size_t M, std::size_t K, std::uint8_t* data,
                                              std::uint8_t* scale, std::size_t scale_cols, bool stream) noexcept {
  if (use_streaming_stores(stream, data, K)) {
    mxfp8_rowwise_run<D, true>(x, M, K, data, scale, scale_cols);
    stream_fence();
  } else {
    mxfp8_rowwise_run<D, false>(x, M, K, data, scale, scale_cols);
  }
}

/// max(m, |v| of the non-NaN lanes of v), for amaxes kept as floats: maxps returns its second operand
/// when either is NaN, so a NaN lane leaves m as it was (m is never NaN: it starts at 0). On the
/// non-negative, non-NaN values left, the float max orders as amax_key's integer max of the bits, so
/// the bits of the result are the amax key (2 operations per 8 elements instead of amax_key8's 4).
TEQUANT_TARGET_AVX2_INLINE inline __m256 abs_max_skip_nan(__m256 v, __m256 m) noexcept {
  return _mm256_max_ps(_mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))), m);
}

/// Column amax keys of the 32 x (8 * NV) values at p (row stride K): lane i of keys[j] = max over the
/// 32 rows of the key of column 8j + i. Kept in registers, so the column max costs no loads or stores
/// of a colmax array.
template <int NV, class T>
TEQUANT_TARGET_AVX2_INLINE inline void column_keys32(const T* p, std::size_t K, __m256i* keys) noexcept {
  if constexpr (std::is_same_v<T, bf16>) {
    // 16 columns per load on the 16-bit patterns, widened to 32-bit keys at the end.
    __m256i m[NV / 2];
    for (int h = 0; h < NV / 2; ++h) m[h] = _mm256_setzero_si256();
    for (std::size_t r = 0; r < 32; ++r)
      for (int h = 0; h < NV / 2; ++h) m[h] = _mm256_max_epi16(m[h], bf16_keys16(p + r * K + h * 16));
    for (int h = 0; h < NV / 2; ++h) {
      keys[2 * h] = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(m[h])), 16);
      keys[2 * h + 1] = _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(m[h], 1)), 16);
    }
  } else if constexpr (std::is_same_v<T, float>) {
    // NaN-skipping float maxima: 2 operations per 8 elements (amax_key8: 4).
    __m256 m[NV];
    for (int j = 0; j < NV; ++j) m[j] = _mm256_setzero_ps();
    for (std::size_t r = 0; r < 32; ++r)
      for (int j = 0; j < NV; ++j) m[j] = abs_max_skip_nan(_mm256_loadu_ps(p + r * K + j * 8), m[j]);
    for (int j = 0; j < NV; ++j) keys[j] = _mm256_castps_si256(m[j]);
  } else {
    for (int j = 0; j < NV; ++j) keys[j] = _mm256_setzero_si256();
    for (std::size_t r = 0; r < 32; ++r)
      for (int j = 0; j < NV; ++j) keys[j] = _mm256_max_epi32(keys[j], amax_key8(load8(p + r * K + j * 8)));
  }
}

/// MXFP8 32x1 blocks of the 32 x (8 * NV) values at x + c0 (row stride K): column amaxes in registers,
/// E8M0 codes and multipliers 8-wide, then the cast while the same columns of later groups are
/// prefetched row by row. The hardware prefetcher does not follow 32 interleaved row streams, and the
/// prefetch goes to L2 (T1): rows K * sizeof(T) apart (a multiple of 4 KiB for the usual K) share L1
/// sets, so prefetching into L1 would evict the lines still to be cast.
template <fp8_dtype D, int NV, bool Stream, class T>
TEQUANT_TARGET_AVX2 inline void mxfp8_column_group(const T* x, std::size_t K, std::size_t c0, std::uint8_t* data,
                                                   std::uint8_t* scale) noexcept {
  constexpr std::size_t ahead = 1024 / sizeof(T);  // measured best of 512 to 4096 bytes per row
  __m256i keys[NV];
  column_keys32<NV>(x + c0, K, keys);
  __m256 mult[NV];
  for (int j = 0; j < NV; ++j) {
    const __m256i e = e8m0_codes8<D>(keys[j]);
    store8_bytes(scale + c0 + j * 8, e);
    mult[j] = e8m0_multipliers8(e);
  }
  for (int q = 0; q < NV; q += 4) {
    __m256 m[4];
    halves_order<T>(mult + q, m);
    for (int j = 0; j < 4; ++j) mult[q + j] = m[j];
  }
  const bool prefetch = c0 + ahead < K;
  for (std::size_t r = 0; r < 32; ++r) {
    const T* p = x + r * K + c0;
    if (prefetch)
      for (std::size_t o = 0; o < NV * 8 * sizeof(T); o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + ahead) + o, _MM_HINT_T1);
    for (int q = 0; q < NV; q += 4) {
      __m256 v[4];
      load32(p + q * 8, v);
      store32<Stream, halves<T>>(data + r * K + c0 + q * 8, encode8<D>(_mm256_mul_ps(v[0], mult[q])),
                                 encode8<D>(_mm256_mul_ps(v[1], mult[q + 1])), encode8<D>(_mm256_mul_ps(v[2], mult[q + 2])),
                                 encode8<D>(_mm256_mul_ps(v[3], mult[q + 3])));
    }
  }
}

// 256 bytes of each row per group (64 fp32 or 128 16-bit columns; measured: 32 columns leave half of
// each 64-byte output line to the next group, 128 fp32 columns run out of registers), 32 at the end.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2 inline void mxfp8_columnwise_run(const T* x, std::size_t K, std::uint8_t* data, std::uint8_t* scale) noexcept {
  constexpr int NV = 256 / (8 * sizeof(T));
  std::size_t c0 = 0;
  for (; c0 + NV * 8 <= K; c0 += NV * 8) mxfp8_column_group<D, NV, Stream>(x, K, c0, data, scale);
  for (; c0 < K; c0 += 32) mxfp8_column_group<D, 4, Stream>(x, K, c0, data, scale);
}

template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX2 inline void mxfp8_columnwise(const T* x, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                                                 bool stream) noexcept {
  if (use_streaming_stores(stream, data, K)) {
    mxfp8_columnwise_run<D, true>(x, K, data, scale);
    stream_fence();
  } else {
    mxfp8_columnwise_run<D, false>(x, K, data, scale);
  }
}

/// max(m, the amax keys of the 128 elements at p) in 8 lanes: NaN-skipping float maxima for fp32 (two
/// chains), keys32 for 16-bit inputs.
template <class T>
TEQUANT_TARGET_AVX2_INLINE inline __m256i tile_keys128(const T* p, __m256i m) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    __m256 a = _mm256_castsi256_ps(m), b = _mm256_setzero_ps();
    for (int j = 0; j < 16; j += 2) {
      a = abs_max_skip_nan(_mm256_loadu_ps(p + 8 * j), a);
      b = abs_max_skip_nan(_mm256_loadu_ps(p + 8 * j + 8), b);
    }
    return _mm256_castps_si256(_mm256_max_ps(a, b));
  } else {
    return _mm256_max_epi32(m, _mm256_max_epi32(_mm256_max_epi32(keys32(p), keys32(p + 32)),
                                                _mm256_max_epi32(keys32(p + 64), keys32(p + 96))));
  }
}

/// scale_from_amax for 8 lanes of non-NaN amax bits (same IEEE operations, same order of cases).
template <fp8_dtype D>
TEQUANT_TARGET_AVX2_INLINE inline __m256 block_scales8(__m256i amax_bits, bool pow2, float eps, float value_for_inf) noexcept {
  const __m256i abs_mask = _mm256_set1_epi32(0x7FFFFFFF), inf_bits = _mm256_set1_epi32(0x7F800000);
  __m256 a = _mm256_castsi256_ps(amax_bits);
  const __m256 e = _mm256_set1_ps(eps);
  a = _mm256_blendv_ps(a, e, _mm256_cmp_ps(a, e, _CMP_LT_OQ));
  const __m256i ab = _mm256_and_si256(_mm256_castps_si256(a), abs_mask);
  const __m256 one = _mm256_or_ps(_mm256_cmp_ps(a, _mm256_setzero_ps(), _CMP_EQ_OQ),
                                  _mm256_castsi256_ps(_mm256_cmpgt_epi32(ab, _mm256_set1_epi32(0x7F7FFFFF))));
  __m256 s = _mm256_div_ps(_mm256_set1_ps(fp8_max(D)), a);
  const __m256i s_inf = _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(s), abs_mask), inf_bits);
  s = _mm256_blendv_ps(s, _mm256_set1_ps(value_for_inf), _mm256_castsi256_ps(s_inf));
  if (pow2) s = _mm256_and_ps(s, _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0xFF800000u))));
  return _mm256_blendv_ps(s, _mm256_set1_ps(1.0f), one);
}

template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2 inline void block_rowwise_run(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale_inv,
                                                  std::size_t scale_stride, bool pow2, float eps, float value_for_inf) noexcept {
  constexpr std::size_t ahead = prefetch_ahead(8 * 128 * sizeof(T));
  const std::size_t full = K / 1024 * 1024;  // columns covered by groups of eight full 1x128 tiles
  for (std::size_t m = 0; m < M; ++m) {
    const T* src = x + m * K;
    std::uint8_t* dst = data + m * K;
    for (std::size_t c0 = 0; c0 < full; c0 += 1024) {
      const T* p = src + c0;
      __m256i bm[8];
      for (int b = 0; b < 8; ++b) {
        const T* t = p + b * 128;
        bm[b] = tile_keys128(t, _mm256_setzero_si256());
      }
      const __m256 s = block_scales8<D>(transpose_max8(bm), pow2, eps, value_for_inf);
      alignas(32) float inv[8];
      _mm256_store_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), s));
      for (int b = 0; b < 8; ++b) scale_inv[(c0 / 128 + static_cast<std::size_t>(b)) * scale_stride + m] = inv[b];
      for (int b = 0; b < 8; ++b) {
        prefetch_bytes(p + b * 128 + ahead / sizeof(T), 128 * sizeof(T));
        const __m256 sb = lane(s, b);
        for (int q = 0; q < 4; ++q) encode32<D, Stream>(p + b * 128 + q * 32, sb, dst + c0 + b * 128 + q * 32);
      }
    }
    for (std::size_t c0 = full; c0 < K; c0 += 128) {
      const std::size_t len = K - c0 < 128 ? K - c0 : 128;
      const float s = scale_from_amax(bits_float(amax(src + c0, len)), fp8_max(D), pow2, eps, value_for_inf);
      scale_inv[(c0 / 128) * scale_stride + m] = 1.0f / s;
      scale_encode<D>(src + c0, len, s, dst + c0, false);
    }
  }
}

template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX2 inline void block_rowwise(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale_inv,
                                              std::size_t scale_stride, bool pow2, float eps, float value_for_inf,
                                              bool stream) noexcept {
  if (use_streaming_stores(stream, data, K)) {
    block_rowwise_run<D, true>(x, M, K, data, scale_inv, scale_stride, pow2, eps, value_for_inf);
    stream_fence();
  } else {
    block_rowwise_run<D, false>(x, M, K, data, scale_inv, scale_stride, pow2, eps, value_for_inf);
  }
}

// Two passes over each 128-row block, both reading whole rows in order (what the hardware prefetcher
// follows): the amaxes of all its tiles (a vector of keys per tile, in L1), then the cast, tile by
// tile within each row with the tile's scale broadcast, rereading the block (2 MiB of fp32 at K =
// 4096: more than L2). The two are software-pipelined a row at a time: the amaxes of row r of block
// mb, then the cast of row r of block mb - 1, so the reads of one block's amax pass alternate with the
// encoding of the block before instead of the whole passes taking turns (interleaving them a tile at
// a time measured 2.5x slower for fp32: the two rows are a power of two apart). Measured: walking one
// 128x128 tile at a time (amax, then the cast from cache) was 2.5x slower: rows K * sizeof(T) apart
// share cache sets, so a tile does not stay in L2.
inline constexpr std::size_t block_2d_chunk = 32768;  // columns per call of block_2d_run (its keys: 8 KiB)

/// The tile keys of row p max-accumulated into keys (as keys32's, or NaN-skipping float maxima for
/// fp32: tile_keys128), those of its partial last tile into tail.
template <class T>
TEQUANT_TARGET_AVX2_INLINE inline void block_2d_row_amax(const T* p, std::size_t K, __m256i* keys, std::uint32_t& tail) noexcept {
  const std::size_t full = K / 128;
  for (std::size_t kb = 0; kb < full; ++kb) keys[kb] = tile_keys128(p + kb * 128, keys[kb]);
  if (full * 128 < K) {
    const std::uint32_t k = amax(p + full * 128, K - full * 128);
    tail = k > tail ? k : tail;
  }
}

/// Row p cast tile by tile with scale[kb] into out.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2_INLINE inline void block_2d_row_cast(const T* p, std::size_t K, const float* scale, std::uint8_t* out) noexcept {
  const std::size_t full = K / 128;
  for (std::size_t kb = 0; kb < full; ++kb) {
    const __m256 sv = _mm256_set1_ps(scale[kb]);
    for (int q = 0; q < 4; ++q) encode32<D, Stream>(p + kb * 128 + q * 32, sv, out + kb * 128 + q * 32);
  }
  if (full * 128 < K) scale_encode<D>(p + full * 128, K - full * 128, scale[full], out + full * 128, false);
}

/// Columns [0, K) (K <= block_2d_chunk) of x [M, *] (row stride ld): scale[mb * scale_ld + kb], and the
/// codes into data (row stride ld) when non-null.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2 inline void block_2d_run(const T* x, std::size_t M, std::size_t K, std::size_t ld, std::uint8_t* data,
                                             float* scale, std::size_t scale_ld, bool pow2, float eps, float value_for_inf) noexcept {
  const std::size_t KB = (K + 127) / 128, full = K / 128, MB = (M + 127) / 128;
  __m256i keys[block_2d_chunk / 128];
  for (std::size_t mb = 0; mb < MB; ++mb) {
    const std::size_t nr = M - mb * 128 < 128 ? M - mb * 128 : 128;
    const bool cast = data && mb;  // the row block before (always 128 rows), with its scales
    const float* sc = scale + (mb ? mb - 1 : 0) * scale_ld;
    for (std::size_t kb = 0; kb < KB; ++kb) keys[kb] = _mm256_setzero_si256();
    std::uint32_t tail = 0;
    for (std::size_t r = 0; r < nr; ++r) {
      block_2d_row_amax(x + (mb * 128 + r) * ld, K, keys, tail);
      if (cast) block_2d_row_cast<D, Stream>(x + ((mb - 1) * 128 + r) * ld, K, sc, data + ((mb - 1) * 128 + r) * ld);
    }
    if (cast)
      for (std::size_t r = nr; r < 128; ++r)
        block_2d_row_cast<D, Stream>(x + ((mb - 1) * 128 + r) * ld, K, sc, data + ((mb - 1) * 128 + r) * ld);
    for (std::size_t kb = 0; kb < KB; ++kb)
      scale[mb * scale_ld + kb] =
          scale_from_amax(bits_float(kb < full ? hmax_epi32(keys[kb]) : tail), fp8_max(D), pow2, eps, value_for_inf);
  }
  if (data && MB)  // the last row block: nothing left to read ahead
    for (std::size_t m = (MB - 1) * 128; m < M; ++m)
      block_2d_row_cast<D, Stream>(x + m * ld, K, scale + (MB - 1) * scale_ld, data + m * ld);
}

template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX2 inline void block_2d(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale, bool pow2,
                                         float eps, float value_for_inf, bool stream) noexcept {
  const bool st = data && use_streaming_stores(stream, data, K);
  const std::size_t KB = (K + 127) / 128;
  for (std::size_t c0 = 0; c0 < K; c0 += block_2d_chunk) {
    const std::size_t w = K - c0 < block_2d_chunk ? K - c0 : block_2d_chunk;
    std::uint8_t* out = data ? data + c0 : nullptr;
    if (st) block_2d_run<D, true>(x + c0, M, w, K, out, scale + c0 / 128, KB, pow2, eps, value_for_inf);
    else block_2d_run<D, false>(x + c0, M, w, K, out, scale + c0 / 128, KB, pow2, eps, value_for_inf);
  }
  if (st) stream_fence();
}

}  // namespace avx2
#endif  // TEQUANT_HAS_X86_TARGET_ATTRIBUTES

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

/// Codes of the 32 bf16 in `a` times s (finite, > 0), in order. When Amax, m (16-bit lanes) is
/// max-accumulated with the sign-cleared bf16 patterns of the non-NaN inputs.
template <fp8_dtype D, bool Amax>
TEQUANT_TARGET_AVX512_INLINE inline __m256i encode32(__m512i a, __m512 s, __m512i& m) noexcept {
  const __m512 even = _mm512_castsi512_ps(_mm512_slli_epi32(a, 16));
  const __m512 odd = _mm512_castsi512_ps(_mm512_and_si512(a, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
  const __m512i ce = code_low_bytes16<D>(_mm512_mul_ps(even, s));
  const __m512i co = code_low_bytes16<D>(_mm512_mul_ps(odd, s));
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
#  pragma GCC unroll 8
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

}  // namespace avx512
#  if defined(__GNUC__) && !defined(__clang__)
#    pragma GCC diagnostic pop
#  endif
#endif  // TEQUANT_HAS_X86_TARGET_ATTRIBUTES

/// Whether the AVX2 + F16C kernels can run here. Checked once; the function-local static makes the
/// first call thread-safe and the answer never changes within a process.
inline bool host_has_avx2() noexcept {
#if TEQUANT_HOST_AVX2_BASELINE
  return true;
#elif TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  static const bool yes = [] {
    __builtin_cpu_init();  // in case this runs before the CPU model is initialised (static initialisers)
    unsigned a = 0, b = 0, c = 0, d = 0;
    // __builtin_cpu_supports("avx2") also checks that the OS saves the YMM state.
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
  }();
  return yes;
#else
  return false;
#endif
}

/// Whether the AVX-512 bf16 kernels (F, BW, VL, DQ, VBMI) can run here (checked once, like host_has_avx2).
inline bool host_has_avx512() noexcept {
#if TEQUANT_HOST_AVX512_BASELINE
  return true;
#elif TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  static const bool yes = [] {
    __builtin_cpu_init();
    // Also checks that the OS saves the ZMM and mask registers.
    return host_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vbmi");
  }();
  return yes;
#else
  return false;
#endif
}

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
#  define TEQUANT_HOST_DISPATCH(T, call)                  \
    if constexpr (avx2::input<T>) {                       \
      if (host_has_avx2()) return avx2::call;             \
    }
// The bf16 casts that have an AVX-512 version try it first.
#  define TEQUANT_HOST_DISPATCH_AVX512_BF16(T, call) \
    if constexpr (std::is_same_v<T, bf16>) {          \
      if (host_has_avx512()) return avx512::call;     \
    }
#else
#  define TEQUANT_HOST_DISPATCH(T, call)
#  define TEQUANT_HOST_DISPATCH_AVX512_BF16(T, call)
#endif

// The entry points declared in host_kernels.hpp (documented there).
template <class T>
float amax_host(const T* x, std::size_t n) noexcept {
  const auto bits = [&]() noexcept -> std::uint32_t {
    TEQUANT_HOST_DISPATCH_AVX512_BF16(T, amax(x, n))
    TEQUANT_HOST_DISPATCH(T, amax(x, n))
    return amax_bits_scalar(x, n);
  };
  return bits_float(bits());
}

template <fp8_dtype D, class T>
void scale_encode_host(const T* x, std::size_t n, float scale, std::uint8_t* out, std::uint32_t* amax_bits) noexcept {
  const auto run = [&]() noexcept -> std::uint32_t {
    TEQUANT_HOST_DISPATCH_AVX512_BF16(T, scale_encode<D>(x, n, scale, out, amax_bits != nullptr))
    TEQUANT_HOST_DISPATCH(T, scale_encode<D>(x, n, scale, out, amax_bits != nullptr))
    return scale_encode_scalar<D>(x, n, scale, out, amax_bits != nullptr);
  };
  const std::uint32_t m = run();
  if (amax_bits && m > *amax_bits) *amax_bits = m;
}

template <fp8_dtype D, class T>
void scale_encode_each_host(const T* x, std::size_t n, const float* scale, std::uint8_t* out) noexcept {
  TEQUANT_HOST_DISPATCH(T, scale_encode_each<D>(x, n, scale, out))
  scale_encode_each_scalar<D>(x, n, scale, out);
}

template <class T>
void column_amax_host(const T* x, std::size_t n, std::uint32_t* colmax) noexcept {
  TEQUANT_HOST_DISPATCH(T, column_amax(x, n, colmax))
  column_amax_scalar(x, n, colmax);
}

template <fp8_dtype D, class T>
void mxfp8_rowwise_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                        std::size_t scale_cols, [[maybe_unused]] bool stream) noexcept {
  TEQUANT_HOST_DISPATCH_AVX512_BF16(T, mxfp8_rowwise<D>(x, M, K, data, scale, scale_cols, stream))
  TEQUANT_HOST_DISPATCH(T, mxfp8_rowwise<D>(x, M, K, data, scale, scale_cols, stream))
  mxfp8_rowwise_scalar<D>(x, M, K, data, scale, scale_cols);
}

template <fp8_dtype D, class T>
void mxfp8_columnwise_host(const T* x, std::size_t K, std::uint8_t* data, std::uint8_t* scale, [[maybe_unused]] bool stream) noexcept {
  TEQUANT_HOST_DISPATCH(T, mxfp8_columnwise<D>(x, K, data, scale, stream))
  mxfp8_columnwise_scalar<D>(x, K, data, scale);
}

template <fp8_dtype D, class T>
void block_rowwise_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale_inv,
                        std::size_t scale_stride, bool pow2, float eps, float value_for_inf, [[maybe_unused]] bool stream) noexcept {
  TEQUANT_HOST_DISPATCH(T, block_rowwise<D>(x, M, K, data, scale_inv, scale_stride, pow2, eps, value_for_inf, stream))
  block_rowwise_scalar<D>(x, M, K, data, scale_inv, scale_stride, pow2, eps, value_for_inf);
}

template <fp8_dtype D, class T>
void block_2d_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale, bool pow2, float eps,
                   float value_for_inf, [[maybe_unused]] bool stream) noexcept {
  TEQUANT_HOST_DISPATCH(T, block_2d<D>(x, M, K, data, scale, pow2, eps, value_for_inf, stream))
  block_2d_scalar<D>(x, M, K, data, scale, pow2, eps, value_for_inf);
}

#undef TEQUANT_HOST_DISPATCH
#undef TEQUANT_HOST_DISPATCH_AVX512_BF16

}  // namespace tequant::detail
