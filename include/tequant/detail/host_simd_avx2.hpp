// SPDX-License-Identifier: Apache-2.0
// The AVX2 + F16C host kernels (x86 with g++/clang, compiled with a target attribute whatever the
// translation unit's flags, chosen at run time by host_simd.hpp): the same bits as the portable loops.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tequant/config.hpp"
#include "tequant/detail/host_simd_avx2_pow2.hpp"
#include "tequant/detail/host_simd_scalar.hpp"

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
#  include <immintrin.h>
#  if __has_include(<unistd.h>)
#    include <unistd.h>  // sysconf: the last-level cache's size (per_tensor_stream_min_bytes)
#  endif
#endif

namespace tequant::detail {

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
TEQUANT_TARGET_AVX2_INLINE inline __m256i bf16_keys16(__m256i a) noexcept {
  const __m256i k = _mm256_and_si256(a, _mm256_set1_epi16(0x7FFF));
  return _mm256_andnot_si256(_mm256_cmpgt_epi16(k, _mm256_set1_epi16(0x7F80)), k);
}

TEQUANT_TARGET_AVX2_INLINE inline __m256i bf16_keys16(const bf16* p) noexcept {
  return bf16_keys16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

/// The largest of 16-bit keys m as 32-bit amax keys in 8 lanes.
TEQUANT_TARGET_AVX2_INLINE inline __m256i widen_keys16(__m256i m) noexcept {
  return _mm256_slli_epi32(_mm256_max_epi32(_mm256_and_si256(m, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(m, 16)), 16);
}

/// max(m, |v| of the non-NaN lanes of v), for amaxes kept as floats: maxps returns its second operand
/// when either is NaN, so a NaN lane leaves m as it was (m is never NaN: it starts at 0). On the
/// non-negative, non-NaN values left, the float max orders as amax_key's integer max of the bits, so
/// the bits of the result are the amax key (2 operations per 8 elements instead of amax_key8's 4).
TEQUANT_TARGET_AVX2_INLINE inline __m256 abs_max_skip_nan(__m256 v, __m256 m) noexcept {
  return _mm256_max_ps(_mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF))), m);
}

/// 8 lanes of amax keys whose max is the amax key of the 32 elements at p.
template <class T>
TEQUANT_TARGET_AVX2_INLINE inline __m256i keys32(const T* p) noexcept {
  if constexpr (std::is_same_v<T, bf16>) {
    // On the 16-bit patterns directly, widened to 32-bit keys at the end.
    return widen_keys16(_mm256_max_epi16(bf16_keys16(p), bf16_keys16(p + 16)));
  } else {
    // NaN-skipping float maxima in two chains (9 operations per 32 elements; amax_key8's: 15).
    const __m256 z = _mm256_setzero_ps();
    const __m256 a = abs_max_skip_nan(load8(p + 8), abs_max_skip_nan(load8(p), z));
    const __m256 b = abs_max_skip_nan(load8(p + 24), abs_max_skip_nan(load8(p + 16), z));
    return _mm256_castps_si256(_mm256_max_ps(a, b));
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
/// The code of |y| (0 to the largest finite code; y not NaN): encode8 without the sign and the NaN test.
template <fp8_dtype D>
TEQUANT_TARGET_AVX2_INLINE inline __m256i magnitude_code8(__m256 y) noexcept {
  using tr = fp8_traits<D>;
  constexpr int emin_biased = 127 + 1 - tr::bias;  // the smallest normal exponent, float-biased
  const __m256i a = _mm256_and_si256(_mm256_castps_si256(y), _mm256_set1_epi32(0x7FFFFFFF));
  const __m256 mag = _mm256_min_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(fp8_max(D)));
  const __m256i e = _mm256_max_epi32(_mm256_and_si256(_mm256_castps_si256(mag), _mm256_set1_epi32(0x7F800000)),
                                     _mm256_set1_epi32(emin_biased << 23));
  const __m256i c = _mm256_add_epi32(e, _mm256_set1_epi32((23 - tr::mant) << 23));
  const __m256i steps = _mm256_sub_epi32(_mm256_castps_si256(_mm256_add_ps(mag, _mm256_castsi256_ps(c))), c);
  const __m256i base = _mm256_sub_epi32(_mm256_srli_epi32(e, 23 - tr::mant), _mm256_set1_epi32(emin_biased << tr::mant));
  return _mm256_add_epi32(steps, base);
}

template <fp8_dtype D>
TEQUANT_TARGET_AVX2_INLINE inline __m256i encode8(__m256 y) noexcept {
  const __m256i u = _mm256_castps_si256(y);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));
  const __m256i code = _mm256_or_si256(magnitude_code8<D>(y), sign);  // NaN: min gave the largest code, fixed here
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF)), _mm256_set1_epi32(0x7F800000));
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

/// 32 codes already in byte order at out (Stream: non-temporal, out 16-byte aligned).
template <bool Stream>
TEQUANT_TARGET_AVX2_INLINE inline void store_bytes32(std::uint8_t* out, __m256i b) noexcept {
  if constexpr (Stream) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), _mm256_castsi256_si128(b));
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + 16), _mm256_extracti128_si256(b, 1));
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), b);
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

/// out[0..32 * n) = fp8(x[0..32 * n) * mult) for a power of two mult (c: its constants): encode32_pow2,
/// and encode32 for all n where that reports a lane (once per group: the common case has one test).
/// Block scaling's tiles only: a tile holding an inf has scale 1, so encode32_pow2 needs no inf test.
template <fp8_dtype D, bool Stream, int N>
TEQUANT_TARGET_AVX2_INLINE inline void encode_pow2_group(const bf16* x, const pow2_words& c, __m256 mult, std::uint8_t* out) noexcept {
  __m256i slow = _mm256_setzero_si256();
  for (int q = 0; q < N; ++q) store_bytes32<Stream>(out + 32 * q, encode32_pow2<D, false>(x + 32 * q, c, c, slow));
  if (!_mm256_testz_si256(slow, slow))
    for (int q = 0; q < N; ++q) encode32<D, Stream>(x + 32 * q, mult, out + 32 * q);
}

/// One 1x128 tile (or MXFP8's eight 32-element blocks with their own multipliers: encode_pow2_group
/// each) of T at x times s: encode_pow2_group where T is bf16 and s a power of two (block scaling's
/// power-of-two scales; c: its constants), else encode32.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2_INLINE inline void encode_tile128(const T* x, float s, const pow2_pairs& c, std::uint8_t* out) noexcept {
  const __m256 sv = _mm256_set1_ps(s);
  if constexpr (std::is_same_v<T, bf16>) {
    if (pow2_multiplier(s)) return encode_pow2_group<D, Stream, 4>(x, c.words(), sv, out);
  }
  for (int q = 0; q < 4; ++q) encode32<D, Stream>(x + 32 * q, sv, out + 32 * q);
}

/// pow2_pairs of one power-of-two multiplier s (scalar: once per tile and row block).
template <fp8_dtype D>
inline pow2_pairs pow2_pairs_of(float s) noexcept {
  using tr = fp8_traits<D>;
  std::uint32_t bits = 0;
  __builtin_memcpy(&bits, &s, 4);
  const std::int32_t d = (static_cast<std::int32_t>(bits >> 23) + tr::bias - 254) * 128;
  const std::int32_t add = d + (1 << (6 - tr::mant)) - 1, lo = 0x80 - d > 0x80 ? 0x80 - d : 0x80;
  const auto pair = [](std::int32_t v) { return static_cast<std::int32_t>((static_cast<std::uint32_t>(v) & 0xFFFFu) * 0x10001u); };
  return {pair(add), pair(lo), pair(lo + 0x7FFF)};
}

/// Prefetches [p, p + bytes) into L1. The grouped kernels read a group twice (amax, then cast from L1);
/// without this the first read is a burst of loads with nothing to overlap the memory latency with.
TEQUANT_TARGET_AVX2_INLINE inline void prefetch_bytes(const void* p, std::size_t bytes) noexcept {
  for (std::size_t o = 0; o < bytes; o += 64) _mm_prefetch(static_cast<const char*>(p) + o, _MM_HINT_T0);
}

/// How far ahead of the group being cast the next groups are prefetched: at least one group, and at
/// least 2 KiB (the bandwidth-latency product of one core, roughly).
inline constexpr std::size_t prefetch_ahead(std::size_t group_bytes) noexcept { return group_bytes < 2048 ? 2048 : group_bytes; }

/// How far ahead the one-pass loops over a whole tensor (the per-tensor casts, the amax pass) prefetch
/// their input. On the Intel Xeon (Sapphire Rapids class) this was measured on, the hardware prefetcher
/// alone left the fp32 cast with fused amax at 18 ms per 64 MiB against 9 ms with it (2, 8 KiB ahead:
/// slower than 4); on AMD Zen 4 an earlier measurement found prefetching neither better nor worse.
inline constexpr std::size_t stream_prefetch_bytes = 4096;

/// The output size from which the per-tensor casts use streaming stores: streaming_store_min_bytes, or
/// three quarters of one core's share of the last-level cache where the C library reports its size
/// (glibc's memcpy switches to non-temporal stores by a similar rule), whichever is larger. An output
/// that fits in that share is cheaper to write with ordinary stores, and its consumer finds it in
/// cache. Measured: with a reported 480 MiB cache on 2 cores (Xeon) 64 MiB of fp32 casts in 7.2 ms
/// with ordinary stores and 9.2 with streaming ones; on the Zen 4 machine measured earlier streaming
/// was the faster at these sizes (it still streams there if its reported share is below the output;
/// not measured since). Checked once.
inline std::size_t per_tensor_stream_min_bytes() noexcept {
  static const std::size_t bytes = [] {
    std::size_t b = streaming_store_min_bytes;
#if defined(__GLIBC__) && defined(_SC_LEVEL3_CACHE_SIZE) && defined(_SC_NPROCESSORS_ONLN)
    const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE), cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (llc > 0 && cores > 0) {
      const std::size_t share = static_cast<std::size_t>(llc) / static_cast<std::size_t>(cores) / 4 * 3;
      b = share > b ? share : b;
    }
#endif
    return b;
  }();
  return bytes;
}

/// Lane b of v broadcast to all lanes.
TEQUANT_TARGET_AVX2_INLINE inline __m256 lane(__m256 v, int b) noexcept { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(b)); }

template <class T>
TEQUANT_TARGET_AVX2 inline std::uint32_t amax(const T* x, std::size_t n) noexcept {
  std::size_t i = 0;
  __m256i m0 = _mm256_setzero_si256(), m1 = m0;
  for (; i + 64 <= n; i += 64) {
    prefetch_bytes(reinterpret_cast<const char*>(x + i) + stream_prefetch_bytes, 64 * sizeof(T));
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
  // The amax as NaN-skipping float maxima (abs_max_skip_nan): its bits are the amax key.
  __m256 mk = _mm256_setzero_ps(), mk2 = mk;
  for (; i + 32 <= n; i += 32) {
    prefetch_bytes(reinterpret_cast<const char*>(x + i) + stream_prefetch_bytes, 32 * sizeof(T));
    __m256 v[4];
    load32(x + i, v);
    const __m256 v0 = v[0], v1 = v[1], v2 = v[2], v3 = v[3];
    if (with_amax) {
      mk = abs_max_skip_nan(v1, abs_max_skip_nan(v0, mk));
      mk2 = abs_max_skip_nan(v3, abs_max_skip_nan(v2, mk2));
    }
    store32<Stream, halves<T>>(out + i, encode8<D>(_mm256_mul_ps(v0, s)), encode8<D>(_mm256_mul_ps(v1, s)),
                    encode8<D>(_mm256_mul_ps(v2, s)), encode8<D>(_mm256_mul_ps(v3, s)));
  }
  return _mm256_castps_si256(_mm256_max_ps(mk, mk2));
}

/// scale_encode_run for bf16 with a scale > 0 that is finite, for inputs without NaN: then y = x * s
/// has x's sign and is NaN only where x is, so the sign comes from x's bytes after the packs (one
/// instruction per 32 elements instead of two per 8) and there is no NaN test per element. It returns
/// the largest sign-cleared input pattern as 32-bit keys, NaN not cleared: above 0x7F800000, the
/// input had a NaN and the caller casts it again with scale_encode_run.
template <fp8_dtype D, bool Stream>
TEQUANT_TARGET_AVX2 inline __m256i scale_encode_run_finite(const bf16* x, std::size_t& i, std::size_t n, __m256 s,
                                                           std::uint8_t* out) noexcept {
  const __m256i z = _mm256_setzero_si256(), magnitude = _mm256_set1_epi16(0x7FFF);
  __m256i mk = z;
  for (; i + 32 <= n; i += 32) {
    prefetch_bytes(reinterpret_cast<const char*>(x + i) + stream_prefetch_bytes, 32 * sizeof(bf16));
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i + 16));
    mk = _mm256_max_epi16(mk, _mm256_max_epi16(_mm256_and_si256(a, magnitude), _mm256_and_si256(b, magnitude)));
    // load32's halves order: the packs leave elements 0-7, 16-23 | 8-15, 24-31, as packs_epi16(a, b)
    // does, whose bytes keep each input's sign (saturation preserves it).
    const __m256i p01 = _mm256_packus_epi32(magnitude_code8<D>(_mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, a)), s)),
                                            magnitude_code8<D>(_mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, a)), s)));
    const __m256i p23 = _mm256_packus_epi32(magnitude_code8<D>(_mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, b)), s)),
                                            magnitude_code8<D>(_mm256_mul_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, b)), s)));
    const __m256i sign = _mm256_and_si256(_mm256_packs_epi16(a, b), _mm256_set1_epi8(static_cast<char>(0x80)));
    store_bytes32<Stream>(out + i, _mm256_permute4x64_epi64(_mm256_or_si256(_mm256_packus_epi16(p01, p23), sign), 0xD8));
  }
  return widen_keys16(mk);
}

/// scale_encode_run_finite where it applies and finds no NaN, scale_encode_run otherwise.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2 inline __m256i scale_encode_runs(const T* x, std::size_t& i, std::size_t n, float scale, std::uint8_t* out,
                                                     bool with_amax) noexcept {
  const __m256 s = _mm256_set1_ps(scale);
  if constexpr (std::is_same_v<T, bf16>) {
    if (scale > 0 && scale <= std::numeric_limits<float>::max()) {
      const std::size_t start = i;
      const __m256i mk = scale_encode_run_finite<D, Stream>(x, i, n, s, out);
      if (hmax_epi32(mk) <= 0x7F800000u) return with_amax ? mk : _mm256_setzero_si256();
      i = start;  // a NaN: cast the run again with the per-element NaN test
    }
  }
  return scale_encode_run<D, Stream>(x, i, n, s, out, with_amax);
}

/// stream_min: the output size from which it streams (tests pass streaming_store_min_bytes).
template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX2 inline std::uint32_t scale_encode(const T* x, std::size_t n, float scale, std::uint8_t* out, bool with_amax,
                                                      std::size_t stream_min = per_tensor_stream_min_bytes()) noexcept {
  std::size_t i = 0;
  std::uint32_t m = 0;
  if (n >= stream_min) {
    // The few elements before the first 16-byte boundary of out go through the scalar loop.
    const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(out) % 16) % 16;
    m = scale_encode_scalar<D>(x, head, scale, out, with_amax);
    i = head;
    const std::uint32_t mv = hmax_epi32(scale_encode_runs<D, true>(x, i, n, scale, out, with_amax));
    stream_fence();
    m = mv > m ? mv : m;
  } else {
    m = hmax_epi32(scale_encode_runs<D, false>(x, i, n, scale, out, with_amax));
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

/// The eight MXFP8 blocks of 32 bf16 at p with multipliers mult (powers of two; no block has code 254,
/// so none holds an inf) at out: encode32_pow2 with each block's constants, and encode32 for all eight
/// where it reports a lane.
template <fp8_dtype D, bool Stream>
TEQUANT_TARGET_AVX2_INLINE inline void mxfp8_group_pow2(const bf16* p, __m256 mult, std::uint8_t* out) noexcept {
  constexpr std::size_t ahead = prefetch_ahead(8 * 32 * sizeof(bf16));
  pow2_pairs c[8];
  pow2_pairs8<D>(mult, c);
  __m256i slow = _mm256_setzero_si256();
  for (int b = 0; b < 8; ++b) {
    prefetch_bytes(p + b * 32 + ahead / sizeof(bf16), 32 * sizeof(bf16));
    const pow2_words w = c[b].words();
    store_bytes32<Stream>(out + b * 32, encode32_pow2<D, false>(p + b * 32, w, w, slow));  // no code 254: no inf
  }
  if (!_mm256_testz_si256(slow, slow))
    for (int b = 0; b < 8; ++b) encode32<D, Stream>(p + b * 32, lane(mult, b), out + b * 32);
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
      if constexpr (std::is_same_v<T, bf16>) {
        // Code 254 (an inf or overflowing block) has multiplier 0, where inf * 0 is NaN: encode32.
        if (_mm256_testz_si256(_mm256_cmpeq_epi32(e, _mm256_set1_epi32(254)), _mm256_set1_epi32(-1))) {
          mxfp8_group_pow2<D, Stream>(p, mult, dst + kb * 32);
          continue;
        }
      }
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

/// Columns per pass of the AVX2 MXFP8 columnwise kernel: 8 KiB of each of 32 rows (256 KiB) are read
/// twice, the second time from L2 (half of a 512 KiB L2, with room for the next chunk's prefetch), and
/// their per-column constants stay in L1. Measured on a 1 MiB L2 (docs/benchmarks.md): fp32 best at
/// 2048 columns, bf16 at 4096; 1024 fp32 columns slower.
template <class T>
inline constexpr std::size_t mxfp8_columnwise_chunk = 8192 / sizeof(T);

/// Calls rows(src, w, dst, sc, next, next_w) for each chunk of at most N columns of 32 rows of x [M, K],
/// in memory order: src, dst and sc where the chunk's input, codes and E8M0 codes start, and the chunk
/// after it (the next columns of the same rows, else the first of the next 32 rows; next_w = 0 after
/// the last), which the kernel prefetches while it casts this one.
template <std::size_t N, class T, class Rows>
inline void for_each_column_chunk(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                                  std::size_t scale_cols, Rows&& rows) noexcept {
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
      rows(x + m0 * K + c0, w, data + m0 * K + c0, scale + m0 / 32 * scale_cols + c0, next, nw);
    }
  }
}

/// Prefetches the 64 bytes at p into L2 (T1). The columnwise kernels prefetch the next chunk while they
/// cast: T0 measured much slower (it evicts the per-column constants from L1).
TEQUANT_TARGET_AVX2_INLINE inline void prefetch_l2(const void* p) noexcept {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1);
}

/// MXFP8 32x1 blocks of columns [0, W) of the 32 rows at x (fp32 or fp16; row stride K; W a multiple of
/// 32, at most mxfp8_columnwise_chunk<T>): codes at data (row stride K), E8M0 codes at scale[0, W). Two
/// passes, each reading whole rows in order (what the hardware prefetcher follows): the column amaxes
/// (NaN-skipping float maxima, kept in mult), then the cast from cache with the per-column multipliers,
/// prefetching min(W, next_w) columns of the 32 rows at next (row stride K) into L2 so that the next
/// amax pass reads from cache and the memory reads overlap the cast. Walking 256-byte column groups
/// instead (the amax, then the cast of the same group) rereads lines that the 32 rows, a multiple of
/// 4 KiB apart, evict from L1 (they share its sets), and leaves the prefetcher 32 interleaved streams:
/// fp32 0.52x memcpy against 0.71x for this kernel, bf16 0.47x against 0.65x (docs/benchmarks.md).
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2 inline void mxfp8_columnwise_rows(const T* x, std::size_t K, std::size_t W, std::uint8_t* data,
                                                      std::uint8_t* scale, const T* next, std::size_t next_w) noexcept {
  alignas(32) float mult[mxfp8_columnwise_chunk<T>];
  for (std::size_t c = 0; c < W; c += 8) _mm256_store_ps(mult + c, _mm256_setzero_ps());
  for (std::size_t r = 0; r < 32; ++r) {
    const T* p = x + r * K;
    for (std::size_t c = 0; c < W; c += 8) _mm256_store_ps(mult + c, abs_max_skip_nan(load8(p + c), _mm256_load_ps(mult + c)));
  }
  for (std::size_t c = 0; c < W; c += 8) {
    const __m256i e = e8m0_codes8<D>(_mm256_castps_si256(_mm256_load_ps(mult + c)));
    store8_bytes(scale + c, e);
    _mm256_store_ps(mult + c, e8m0_multipliers8(e));
  }
  constexpr std::size_t lines = 32 * sizeof(T) / 64;  // prefetched per 32 columns cast
  for (std::size_t r = 0; r < 32; ++r) {
    const T* p = x + r * K;
    std::uint8_t* out = data + r * K;
    const T* pf = next_w != 0 ? next + r * K : nullptr;
    for (std::size_t c = 0; c < W; c += 32) {
      if (c < next_w)
        for (std::size_t l = 0; l < lines; ++l) prefetch_l2(reinterpret_cast<const char*>(pf + c) + 64 * l);
      store32<Stream>(out + c, encode8<D>(_mm256_mul_ps(load8(p + c), _mm256_load_ps(mult + c))),
                      encode8<D>(_mm256_mul_ps(load8(p + c + 8), _mm256_load_ps(mult + c + 8))),
                      encode8<D>(_mm256_mul_ps(load8(p + c + 16), _mm256_load_ps(mult + c + 16))),
                      encode8<D>(_mm256_mul_ps(load8(p + c + 24), _mm256_load_ps(mult + c + 24))));
    }
  }
}

/// mxfp8_columnwise_rows for bf16: the amaxes on the 16-bit patterns, the cast with encode32_pow2 and
/// each column's constants, and with the float encoder (each 32 columns' multipliers in load32's halves
/// order) for 32 columns where encode32_pow2 reports a lane or a column has code 254 (an inf or
/// overflowing block: multiplier 0, which encode32_pow2 does not take; inf * 0 gives the NaN code).
template <fp8_dtype D, bool Stream>
TEQUANT_TARGET_AVX2 inline void mxfp8_columnwise_rows(const bf16* x, std::size_t K, std::size_t W, std::uint8_t* data,
                                                      std::uint8_t* scale, const bf16* next, std::size_t next_w) noexcept {
  constexpr std::size_t N = mxfp8_columnwise_chunk<bf16>;
  alignas(32) std::uint16_t add[N];  // the column amax keys, then encode32_pow2's add of each column
  alignas(32) std::uint16_t lo[N];   // encode32_pow2's lo of each column
  alignas(32) float mult[N];         // per 32 columns, in load32's halves order
  std::uint8_t zero[N / 32];         // whether the 32 columns from 32 i hold code 254
  for (std::size_t c = 0; c < W; c += 16) _mm256_store_si256(reinterpret_cast<__m256i*>(add + c), _mm256_setzero_si256());
  for (std::size_t r = 0; r < 32; ++r) {
    const bf16* p = x + r * K;
    for (std::size_t c = 0; c < W; c += 16) {
      __m256i* k = reinterpret_cast<__m256i*>(add + c);
      _mm256_store_si256(k, _mm256_max_epi16(_mm256_load_si256(k), bf16_keys16(p + c)));
    }
  }
  for (std::size_t c = 0; c < W; c += 32) {
    __m256 m[4];
    __m256i z = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i k = _mm256_load_si256(reinterpret_cast<const __m256i*>(add + c + 16 * h));
      const __m256i e0 = e8m0_codes8<D>(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(k)), 16));
      const __m256i e1 = e8m0_codes8<D>(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(k, 1)), 16));
      store8_bytes(scale + c + 16 * h, e0);
      store8_bytes(scale + c + 16 * h + 8, e1);
      m[2 * h] = e8m0_multipliers8(e0);
      m[2 * h + 1] = e8m0_multipliers8(e1);
      const __m256i full = _mm256_set1_epi32(254);
      z = _mm256_or_si256(z, _mm256_or_si256(_mm256_cmpeq_epi32(e0, full), _mm256_cmpeq_epi32(e1, full)));
      const pow2_words w = pow2_words16<D>(_mm256_castps_si256(m[2 * h]), _mm256_castps_si256(m[2 * h + 1]));
      _mm256_store_si256(reinterpret_cast<__m256i*>(add + c + 16 * h), w.add);
      _mm256_store_si256(reinterpret_cast<__m256i*>(lo + c + 16 * h), w.lo);
    }
    __m256 mh[4];
    halves_order<bf16>(m, mh);
    for (int j = 0; j < 4; ++j) _mm256_store_ps(mult + c + 8 * j, mh[j]);
    zero[c / 32] = _mm256_testz_si256(z, z) ? 0 : 1;
  }
  for (std::size_t r = 0; r < 32; ++r) {
    const bf16* p = x + r * K;
    std::uint8_t* out = data + r * K;
    const bf16* pf = next_w != 0 ? next + r * K : nullptr;
    for (std::size_t c = 0; c < W; c += 32) {
      if (c < next_w) prefetch_l2(pf + c);
      if (zero[c / 32] == 0) [[likely]] {
        const __m256i lo0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo + c));
        const __m256i lo1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(lo + c + 16));
        const __m256i bias = _mm256_set1_epi16(0x7FFF);  // pow2_words::slow from lo
        const pow2_words c0{_mm256_load_si256(reinterpret_cast<const __m256i*>(add + c)), lo0, _mm256_add_epi16(lo0, bias)};
        const pow2_words c1{_mm256_load_si256(reinterpret_cast<const __m256i*>(add + c + 16)), lo1, _mm256_add_epi16(lo1, bias)};
        __m256i slow = _mm256_setzero_si256();
        const __m256i codes = encode32_pow2<D, false>(p + c, c0, c1, slow);  // no code 254: no inf
        if (_mm256_testz_si256(slow, slow)) [[likely]] {
          store_bytes32<Stream>(out + c, codes);
          continue;
        }
      }
      __m256 v[4];
      load32(p + c, v);
      store32<Stream, true>(out + c, encode8<D>(_mm256_mul_ps(v[0], _mm256_load_ps(mult + c))),
                            encode8<D>(_mm256_mul_ps(v[1], _mm256_load_ps(mult + c + 8))),
                            encode8<D>(_mm256_mul_ps(v[2], _mm256_load_ps(mult + c + 16))),
                            encode8<D>(_mm256_mul_ps(v[3], _mm256_load_ps(mult + c + 24))));
    }
  }
}

/// MXFP8 32x1 columnwise blocks of x [M, K] (M and K multiples of 32): data [M, K], the E8M0 codes of
/// rows [32 mb, 32 mb + 32) at scale[mb * scale_cols + k], a chunk of columns of 32 rows at a time
/// (for_each_column_chunk). The stores are in row order within a chunk, so streaming ones (where
/// use_streaming_stores allows) fill whole lines.
template <fp8_dtype D, class T>
TEQUANT_TARGET_AVX2 inline void mxfp8_columnwise(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                                                 std::size_t scale_cols, bool stream) noexcept {
  const bool st = use_streaming_stores(stream, data, K);
  const auto rows = [st, K](const T* src, std::size_t w, std::uint8_t* dst, std::uint8_t* sc, const T* next, std::size_t nw) {
    if (st) mxfp8_columnwise_rows<D, true>(src, K, w, dst, sc, next, nw);
    else mxfp8_columnwise_rows<D, false>(src, K, w, dst, sc, next, nw);
  };
  for_each_column_chunk<mxfp8_columnwise_chunk<T>>(x, M, K, data, scale, scale_cols, rows);
  if (st) stream_fence();
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
      alignas(32) float inv[8], sv[8];
      _mm256_store_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), s));
      _mm256_store_ps(sv, s);
      pow2_pairs c[8] = {};
      if constexpr (std::is_same_v<T, bf16>) pow2_pairs8<D>(s, c);
      for (int b = 0; b < 8; ++b) scale_inv[(c0 / 128 + static_cast<std::size_t>(b)) * scale_stride + m] = inv[b];
      for (int b = 0; b < 8; ++b) {
        prefetch_bytes(p + b * 128 + ahead / sizeof(T), 128 * sizeof(T));
        encode_tile128<D, Stream>(p + b * 128, sv[b], c[b], dst + c0 + b * 128);
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
// 4096: more than L2). The two are software-pipelined in segments of 2 KiB of input: the amaxes of a
// segment of row r of block mb, then the cast of the same columns of row r of block mb - 1, which
// prefetches into L1 the amax pass's input two segments on, so the reads of one block's amax pass
// overlap the encoding of the block before instead of the passes taking turns (a row at a time
// without the prefetch: 1.3x the time for fp32, 1.1-1.25x for bf16, at 64 MiB on Zen 4; interleaving them
// a tile at a time measured 2.5x slower for fp32: the two rows are a power of two apart). Measured: walking one
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

/// Row p cast tile by tile with scale[kb] (c[kb]: its pow2_pairs where it is a power of two) into out.
/// Before the cast of each full tile kb < next_tiles, the lines of tile kb at next are prefetched.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2_INLINE inline void block_2d_row_cast(const T* p, std::size_t K, const float* scale, const pow2_pairs* c,
                                                        std::uint8_t* out, const T* next = nullptr,
                                                        std::size_t next_tiles = 0) noexcept {
  const std::size_t full = K / 128;
  for (std::size_t kb = 0; kb < full; ++kb) {
    if (kb < next_tiles) prefetch_bytes(next + kb * 128, 128 * sizeof(T));
    encode_tile128<D, Stream>(p + kb * 128, scale[kb], c[kb], out + kb * 128);
  }
  if (full * 128 < K) scale_encode<D>(p + full * 128, K - full * 128, scale[full], out + full * 128, false);
}

/// Columns [0, K) (K <= block_2d_chunk) of x [M, *] (row stride ld): scale[mb * scale_ld + kb], and the
/// codes into data (row stride ld) when non-null.
template <fp8_dtype D, bool Stream, class T>
TEQUANT_TARGET_AVX2 inline void block_2d_run(const T* x, std::size_t M, std::size_t K, std::size_t ld, std::uint8_t* data,
                                             float* scale, std::size_t scale_ld, bool pow2, float eps, float value_for_inf) noexcept {
  constexpr std::size_t seg = 2048 / sizeof(T), ahead = 2 * seg;
  static_assert(seg % 128 == 0);
  const std::size_t KB = (K + 127) / 128, full = K / 128, MB = (M + 127) / 128;
  __m256i keys[block_2d_chunk / 128];
  pow2_pairs c[block_2d_chunk / 128];  // of the row block being cast (16-bit inputs with power-of-two scales)
  const auto pairs_of = [&](const float* sc) {
    if constexpr (std::is_same_v<T, bf16>)
      for (std::size_t kb = 0; kb < full; ++kb) c[kb] = pow2_multiplier(sc[kb]) ? pow2_pairs_of<D>(sc[kb]) : pow2_pairs{};
  };
  for (std::size_t mb = 0; mb < MB; ++mb) {
    const std::size_t nr = M - mb * 128 < 128 ? M - mb * 128 : 128;
    const bool cast = data && mb;  // the row block before (always 128 rows), with its scales
    const float* sc = scale + (mb ? mb - 1 : 0) * scale_ld;
    for (std::size_t kb = 0; kb < KB; ++kb) keys[kb] = _mm256_setzero_si256();
    std::uint32_t tail = 0;
    for (std::size_t r = 0; r < nr; ++r) {
      const std::size_t m = mb * 128 + r;
      if (!cast) {
        block_2d_row_amax(x + m * ld, K, keys, tail);
        continue;
      }
      // In segments: the amaxes of a segment of row m, then the cast of the same columns of row
      // m - 128, which prefetches the amax pass's input two segments on (as avx512::block_2d_run).
      for (std::size_t s = 0; s < K; s += seg) {
        const std::size_t w = K - s < seg ? K - s : seg;  // a multiple of 128 but in the last segment
        block_2d_row_amax(x + m * ld + s, w, keys + s / 128, tail);
        const std::size_t pm = m + (s + ahead) / K, ps = (s + ahead) % K;
        const std::size_t pw = pm < M ? (K - ps < seg ? K - ps : seg) : 0;
        block_2d_row_cast<D, Stream>(x + (m - 128) * ld + s, w, sc + s / 128, c + s / 128, data + (m - 128) * ld + s,
                                     pw ? x + pm * ld + ps : nullptr, pw / 128);
      }
    }
    if (cast)
      for (std::size_t r = nr; r < 128; ++r)
        block_2d_row_cast<D, Stream>(x + ((mb - 1) * 128 + r) * ld, K, sc, c, data + ((mb - 1) * 128 + r) * ld);
    for (std::size_t kb = 0; kb < KB; ++kb)
      scale[mb * scale_ld + kb] =
          scale_from_amax(bits_float(kb < full ? hmax_epi32(keys[kb]) : tail), fp8_max(D), pow2, eps, value_for_inf);
    if (data) pairs_of(scale + mb * scale_ld);
  }
  if (data && MB)  // the last row block: nothing left to read ahead
    for (std::size_t m = (MB - 1) * 128; m < M; ++m)
      block_2d_row_cast<D, Stream>(x + m * ld, K, scale + (MB - 1) * scale_ld, c, data + m * ld);
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

}  // namespace tequant::detail
