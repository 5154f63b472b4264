// SPDX-License-Identifier: Apache-2.0
// Delayed-scaling state of one bucket as a struct of arrays, and TE's fused per-slot update on it.
//
// TE keeps an [L, n] history and rolls all L rows on every update (O(n*L) memory traffic). Here each
// slot has a ring of its last L committed amaxes, and one update touches O(1) memory per slot
// (amortised) whatever L is. The window maximum comes from a monotonic deque of ring positions in the
// per-slot update (delayed_update_slot, also the CUDA kernel's), and in the host's whole-bucket update
// from a scan of the ring (L <= 64) or from suffix maxima of the ring (longer windows); the window
// storage holds whichever of the two was used last, and each rebuilds itself from the ring.
//
// Why a ring of L and not L-1: TE's max window at an update is the current amax plus the L-1 rows it
// has committed before, and TE stores only those L-1 rows (row 0 is the staging amax). Pushing the
// current amax into a ring of the last L commits and taking the max of the ring is exactly that window.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"

#if (defined(__SSE2__) || defined(_M_X64)) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#define TEQUANT_DELAYED_SSE2 1
#if defined(__AVX512F__) && (defined(__GNUC__) || defined(__clang__))  // GCC's vectoriser and attributes
#include <immintrin.h>
#define TEQUANT_DELAYED_AVX512 1
#endif
#endif

namespace tequant {

/// Trivially copyable view of one bucket's delayed-scaling state; the host loop and the CUDA kernel
/// both take it as-is. All pointers point into the backend's memory (host or device).
struct delayed_bucket_view {
  std::uint32_t slots;             ///< n
  std::uint32_t history_length;    ///< L >= 1
  float* staging;                  ///< [n] max-accumulated amax of the current window; the all-reduce buffer
  float* scale;                    ///< [n] q = sat_cast(x * scale)
  float* ring;                     ///< [n*L] committed amaxes, slot j at j*L, position ring_head[j] is next
  std::uint32_t* ring_head;        ///< [n] ring position the next commit overwrites, in [0, L)
  std::uint32_t* window;           ///< [n*L] deque of ring positions (circular, slot j at j*L)
  std::uint32_t* window_front;     ///< [n] deque start, in [0, L)
  std::uint32_t* window_size;      ///< [n] deque length, in [0, L]
};

/// Largest supported history length L (the ring and the deque are n*L each).
inline constexpr std::uint32_t delayed_max_history_length = 1u << 20;

/// Per-bucket arguments of the update.
struct delayed_update_args {
  float scaled_max;  ///< fp8_max(dtype) * 2^-margin
};

namespace detail {

TEQUANT_HD constexpr std::uint32_t ring_next(std::uint32_t i, std::uint32_t n) noexcept { return i + 1 == n ? 0 : i + 1; }

/// window_size value meaning "the deque is out of date; the ring alone is the state". The host
/// update's scan and most_recent paths leave the deque alone (maintaining it is most of their cost),
/// and anything that needs it rebuilds it from the ring first, so the ring stays the one source of truth.
inline constexpr std::uint32_t window_stale = 0xFFFFFFFFu;

/// window_size value of the host update of long windows (delayed_update_bucket_suffix): the window
/// storage holds suffix maxima of the ring instead of a deque (see there). For the deque it is stale.
inline constexpr std::uint32_t window_suffix = 0xFFFFFFFEu;

/// Whether slot j's window storage is not a deque (window_stale or window_suffix): whatever needs the
/// deque rebuilds it from the ring.
TEQUANT_HD constexpr bool window_deque_stale(std::uint32_t size) noexcept { return size >= window_suffix; }

/// Ordering key of a committed amax for the window max: its bits when it is a positive non-NaN float,
/// else 0. A signed max of these from 0 is the bits of the fmaxf chain from 0 (positive floats order
/// like their bits; +0, negatives and NaN never win).
TEQUANT_HD constexpr std::int32_t window_key(float f) noexcept {
  const auto k = static_cast<std::int32_t>(float_bits(f));
  return k > 0x7F800000 ? 0 : k;
}

/// max(0, non-NaN values of ring[0, L)), by a scan (the window is the whole ring).
TEQUANT_HD inline float window_scan_max(const float* ring, std::uint32_t L) noexcept {
  std::int32_t m = 0;
  for (std::uint32_t i = 0; i < L; ++i) {
    const std::int32_t k = window_key(ring[i]);
    m = k > m ? k : m;
  }
  return bits_float(static_cast<std::uint32_t>(m));
}

TEQUANT_HD inline void delayed_ring_push(const delayed_bucket_view& v, std::uint32_t j, float value) noexcept;

/// Rebuilds slot j's window deque from its ring: pushing the L ring values oldest first, starting at
/// the ring head, rewrites each value in place, brings the head back where it was, and leaves the
/// deque every earlier push sequence with the same ring would have left (the strictly decreasing
/// suffix maxima of the window), so every later update is bit-identical.
TEQUANT_HD inline void rebuild_window(const delayed_bucket_view& v, std::uint32_t j) noexcept {
  const std::uint32_t L = v.history_length, head = v.ring_head[j];
  v.window_front[j] = 0;
  v.window_size[j] = 0;
  const float* ring = v.ring + static_cast<std::size_t>(j) * L;
  for (std::uint32_t k = 0; k < L; ++k) {
    std::uint32_t p = head + k;
    if (p >= L) p -= L;
    delayed_ring_push(v, j, ring[p]);
  }
}

/// Commits `v` to slot j's ring and keeps the deque consistent. Only values > 0 enter the deque:
/// the window max starts at 0 and ignores NaN (fmaxf), so 0, -0, negatives and NaN can never be it.
TEQUANT_HD inline void delayed_ring_push(const delayed_bucket_view& v, std::uint32_t j, float value) noexcept {
  if (window_deque_stale(v.window_size[j])) [[unlikely]] rebuild_window(v, j);
  const std::uint32_t L = v.history_length;
  const std::size_t base = static_cast<std::size_t>(j) * L;
  float* ring = v.ring + base;
  std::uint32_t* dq = v.window + base;
  const std::uint32_t pos = v.ring_head[j];
  std::uint32_t front = v.window_front[j];
  std::uint32_t size = v.window_size[j];
  // The entry about to be overwritten is the oldest commit; only the deque front can refer to it.
  if (size != 0 && dq[front] == pos) {
    front = ring_next(front, L);
    --size;
  }
  if (value > 0.0f) {
    while (size != 0) {
      std::uint32_t back = front + size - 1;
      if (back >= L) back -= L;
      if (ring[dq[back]] > value) break;
      --size;
    }
    std::uint32_t slot = front + size;
    if (slot >= L) slot -= L;
    dq[slot] = pos;
    ++size;
  }
  ring[pos] = value;
  v.ring_head[j] = ring_next(pos, L);
  v.window_front[j] = front;
  v.window_size[j] = size;
}

/// max(0, non-NaN values of slot j's ring), bit-equal to an fmaxf chain starting at 0.
TEQUANT_HD inline float delayed_window_max(const delayed_bucket_view& v, std::uint32_t j) noexcept {
  const std::size_t base = static_cast<std::size_t>(j) * v.history_length;
  if (window_deque_stale(v.window_size[j])) [[unlikely]] return window_scan_max(v.ring + base, v.history_length);
  if (v.window_size[j] == 0) return 0.0f;
  return v.ring[base + v.window[base + v.window_front[j]]];
}

}  // namespace detail

/// TE's fused delayed-scaling update of one slot, after the amax reduction (ARCHITECTURE §2):
/// c == 0 leaves the slot untouched; otherwise c (NaN included) is committed, a = algo(c, window max),
/// scale = scaled_max / a if a is finite and > 0 (else the old scale), an infinite scale becomes
/// FLT_MAX, and the staging amax is reset to 0.
template <class Algo>
TEQUANT_HD inline void delayed_update_slot(const delayed_bucket_view& v, std::uint32_t j, float reduced_amax, Algo algo,
                                           delayed_update_args args) noexcept {
  const float c = reduced_amax;
  if (c == 0.0f) return;
  detail::delayed_ring_push(v, j, c);
  const float a = algo(c, detail::delayed_window_max(v, j));
  float s = v.scale[j];
  if (detail::is_finite(a) && a > 0.0f) s = detail::div_rn(args.scaled_max, a);
  if (detail::is_inf(s)) s = detail::float_max;
  v.scale[j] = s;
  v.staging[j] = 0.0f;
}

/// Window functors that never read the window max declare `static constexpr bool uses_window = false`
/// (most_recent); their update only commits to the ring.
template <class Algo>
inline constexpr bool algo_uses_window = [] {
  if constexpr (requires { Algo::uses_window; }) return static_cast<bool>(Algo::uses_window);
  else return true;
}();

/// Windows up to this length are scanned (a few cache lines, no branches) instead of kept in the
/// monotonic deque, whose data-dependent pops mispredict about once per update.
inline constexpr std::uint32_t window_scan_max_length = 64;

namespace detail {

/// window_scan_max on the host, four lanes at a time. maxps(x, m) returns m when x is NaN or not
/// greater, so a chain of them from +0 is the fmaxf chain from 0 over positive non-NaN values: the
/// same float, bit for bit, as the key scan (the lanes' maxima are non-NaN and >= +0, so combining
/// them in any order gives that float too).
template <std::uint32_t FixedL>
inline float ring_max_host(const float* ring, std::uint32_t length) noexcept {
  const std::uint32_t L = FixedL != 0 ? FixedL : length;
#ifdef TEQUANT_DELAYED_SSE2
  __m128 m0 = _mm_setzero_ps(), m1 = _mm_setzero_ps();
  std::uint32_t i = 0;
  for (; i + 8 <= L; i += 8) {
    m0 = _mm_max_ps(_mm_loadu_ps(ring + i), m0);
    m1 = _mm_max_ps(_mm_loadu_ps(ring + i + 4), m1);
  }
  if (i + 4 <= L) {
    m0 = _mm_max_ps(_mm_loadu_ps(ring + i), m0);
    i += 4;
  }
  for (; i < L; ++i) m0 = _mm_max_ps(_mm_set1_ps(ring[i]), m0);
  m0 = _mm_max_ps(m0, m1);
  m0 = _mm_max_ps(m0, _mm_movehl_ps(m0, m0));
  m0 = _mm_max_ss(m0, _mm_shuffle_ps(m0, m0, 1));
  return _mm_cvtss_f32(m0);
#else
  return window_scan_max(ring, L);
#endif
}

#ifdef TEQUANT_DELAYED_SSE2
/// ring_max_host of 4 consecutive rings of length L (a multiple of 4), slot s in lane s. Each lane
/// starts as the maxps chain from +0 (so every partial maximum is non-NaN and >= +0) and the lanes
/// are then combined across slots in a transpose: the same floats as ring_max_host, bit for bit.
template <std::uint32_t L>
inline __m128 ring_max4(const float* ring) noexcept {
  static_assert(L % 4 == 0);
  __m128 a[4];
  for (std::uint32_t s = 0; s < 4; ++s) {
    __m128 m = _mm_setzero_ps();
    for (std::uint32_t i = 0; i < L; i += 4) m = _mm_max_ps(_mm_loadu_ps(ring + s * L + i), m);
    a[s] = m;
  }
  const __m128 b0 = _mm_max_ps(_mm_movelh_ps(a[0], a[1]), _mm_movehl_ps(a[1], a[0]));  // slots 0, 1: 2 each
  const __m128 b1 = _mm_max_ps(_mm_movelh_ps(a[2], a[3]), _mm_movehl_ps(a[3], a[2]));  // slots 2, 3
  return _mm_max_ps(_mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0)), _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1)));
}
#endif

#ifdef TEQUANT_DELAYED_AVX512
// The masked forms with an all-ones mask are the plain instructions; GCC 12's unmasked intrinsics
// pass an "undefined" vector that -Wuninitialized reports at -O3.
inline __m512 max16(__m512 a, __m512 b) noexcept { return _mm512_mask_max_ps(a, 0xFFFF, a, b); }
template <int Imm>
inline __m512 shuffle_f32x4(__m512 a, __m512 b) noexcept { return _mm512_mask_shuffle_f32x4(a, 0xFFFF, a, b, Imm); }
template <int Imm>
inline __m512 shuffle_ps(__m512 a, __m512 b) noexcept { return _mm512_mask_shuffle_ps(a, 0xFFFF, a, b, Imm); }
inline __m512i maxu16(__m512i a, __m512i b) noexcept { return _mm512_mask_max_epu32(a, 0xFFFF, a, b); }
/// Lanes shifted down by Imm, +0 shifted in at the top.
template <int Imm>
inline __m512 shift_down(__m512 t) noexcept {
  const __m512i x = _mm512_castps_si512(t);
  return _mm512_castsi512_ps(_mm512_mask_alignr_epi32(x, 0xFFFF, _mm512_setzero_si512(), x, Imm));
}

/// Lane s of the result: the maximum of the 16 lanes of a[s] (all non-NaN and >= +0).
inline __m512 reduce16(const __m512* a) noexcept {
  __m512 b[8], c[4], d[2];
  // Each step halves the values per slot and doubles the slots per vector: 256-bit halves, 128-bit
  // quarters, pairs, single floats. The last leaves slot 4m + k at position 4k + m.
  for (int i = 0; i < 8; ++i) b[i] = max16(shuffle_f32x4<0x44>(a[2 * i], a[2 * i + 1]), shuffle_f32x4<0xEE>(a[2 * i], a[2 * i + 1]));
  for (int i = 0; i < 4; ++i) c[i] = max16(shuffle_f32x4<0x88>(b[2 * i], b[2 * i + 1]), shuffle_f32x4<0xDD>(b[2 * i], b[2 * i + 1]));
  for (int i = 0; i < 2; ++i) d[i] = max16(shuffle_ps<0x44>(c[2 * i], c[2 * i + 1]), shuffle_ps<0xEE>(c[2 * i], c[2 * i + 1]));
  const __m512 e = max16(shuffle_ps<0x88>(d[0], d[1]), shuffle_ps<0xDD>(d[0], d[1]));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  return _mm512_mask_permutexvar_ps(e, 0xFFFF, order, e);
}

/// ring_max4 for 16 consecutive rings of length L (a multiple of 16), slot s in lane s.
template <std::uint32_t L>
inline __m512 ring_max16(const float* ring) noexcept {
  static_assert(L % 16 == 0);
  __m512 a[16];
  for (std::uint32_t s = 0; s < 16; ++s) {
    __m512 m = _mm512_setzero_ps();
    for (std::uint32_t i = 0; i < L; i += 16) m = max16(_mm512_loadu_ps(ring + s * L + i), m);
    a[s] = m;
  }
  return reduce16(a);
}
#endif

/// scale[j] = scaled_max / a (FLT_MAX for inf) where slot j is used (staging[j] != 0) and its amax a
/// (bits in amax_bits[j]) is finite and > 0; a used slot's staging is reset, an unused one keeps its
/// +-0. MarkStale: amax_bits is the window_size array, marked stale again as it is read.
template <bool MarkStale>
inline void delayed_scale_pass(float* __restrict staging, float* __restrict scale, std::uint32_t* __restrict amax_bits,
                               std::uint32_t n, float scaled_max) noexcept {
  std::uint32_t j = 0;
#if defined(TEQUANT_DELAYED_SSE2) && !defined(TEQUANT_DELAYED_AVX512)  // with AVX-512 the loop below vectorises 16-wide
  const __m128 zero = _mm_setzero_ps(), inf = _mm_set1_ps(bits_float(0x7F800000u)), fmax = _mm_set1_ps(float_max);
  const __m128 num = _mm_set1_ps(scaled_max);
  const __m128i stale = _mm_set1_epi32(static_cast<int>(window_stale));
  for (; j + 4 <= n; j += 4) {
    const __m128 c = _mm_loadu_ps(staging + j);
    const __m128 a = _mm_castsi128_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(amax_bits + j)));
    const __m128 unused = _mm_cmpeq_ps(c, zero);
    // a > 0 and a < inf are both false for NaN; then 0 < scaled_max / a <= inf.
    const __m128 take = _mm_andnot_ps(unused, _mm_and_ps(_mm_cmpgt_ps(a, zero), _mm_cmplt_ps(a, inf)));
    const __m128 s = _mm_min_ps(_mm_div_ps(num, a), fmax);
    const __m128 old = _mm_loadu_ps(scale + j);
    _mm_storeu_ps(scale + j, _mm_or_ps(_mm_and_ps(take, s), _mm_andnot_ps(take, old)));
    _mm_storeu_ps(staging + j, _mm_and_ps(unused, c));
    if constexpr (MarkStale) _mm_storeu_si128(reinterpret_cast<__m128i*>(amax_bits + j), stale);
  }
#endif
  for (; j < n; ++j) {
    const float c = staging[j], a = bits_float(amax_bits[j]);
    float s = div_rn(scaled_max, a);
    s = is_inf(s) ? float_max : s;
    scale[j] = c != 0.0f && is_finite(a) && a > 0.0f ? s : scale[j];
    staging[j] = c == 0.0f ? c : 0.0f;
    if constexpr (MarkStale) amax_bits[j] = window_stale;
  }
}

#ifdef TEQUANT_DELAYED_AVX512
/// The whole update of an algorithm without a window, in one loop that GCC vectorises 16-wide (the
/// commit a gather and a scatter). Only this form vectorises: float compares rather than the bit
/// tests, the store of a select rather than a conditional store, and restrict parameters of a
/// function that is not inlined (GCC cannot check a scatter's aliasing at run time, and inlining
/// loses what the parameters promise). Where the scale is taken, 0 < a < inf and 0 < q <= inf.
template <class Algo>
[[gnu::noinline]] inline void delayed_update_window_free_avx512(float* __restrict staging, float* __restrict ring,
                                                                std::uint32_t* __restrict head, float* __restrict scale,
                                                                std::uint32_t* __restrict window_size, std::uint32_t n,
                                                                std::uint32_t L, Algo algo, float scaled_max) noexcept {
  const float inf = bits_float(0x7F800000u);
  for (std::uint32_t j = 0; j < n; ++j) {
    const float c = staging[j], a = algo(c, 0.0f);
    const std::uint32_t h = head[j], next = h + 1 == L ? 0 : h + 1;
    float& entry = ring[static_cast<std::size_t>(j) * L + h];
    float q = div_rn(scaled_max, a);
    q = q < float_max ? q : float_max;
    const bool used = c != 0.0f;
    entry = used ? c : entry;
    head[j] = used ? next : h;
    scale[j] = used && a > 0.0f && a < inf ? q : scale[j];
    staging[j] = used ? 0.0f : c;
    window_size[j] = window_stale;
  }
}

/// Pass 1 of delayed_update_bucket_ring (the commits), vectorised as above.
[[gnu::noinline]] inline void delayed_commit_avx512(const float* __restrict staging, float* __restrict ring,
                                                    std::uint32_t* __restrict head, std::uint32_t n,
                                                    std::uint32_t L) noexcept {
  for (std::uint32_t j = 0; j < n; ++j) {
    const float c = staging[j];
    const std::uint32_t h = head[j], next = h + 1 == L ? 0 : h + 1;
    float& entry = ring[static_cast<std::size_t>(j) * L + h];
    const bool used = c != 0.0f;
    entry = used ? c : entry;
    head[j] = used ? next : h;
  }
}
#endif

#ifdef TEQUANT_DELAYED_AVX512
/// The whole update of slots [0, n16) (a multiple of 16) with rings of a fixed length (a multiple of
/// 16, at most 32), in one pass of 16 slots at a time. A slot's ring is one or two 16-float vectors:
/// the commit is a masked blend of the amax into the vector at the head (an unused slot's mask is
/// empty) and a masked store, and the window maximum is taken from the vector still in
/// the register (the maxps chain from +0, reduced across the 16 slots as in ring_max16), so the ring
/// is read and written once. Then the heads, and the scales by delayed_scale_pass's rule.
template <std::uint32_t FixedL, class Algo>
inline void delayed_update_ring_lines_avx512(const delayed_bucket_view& v, std::uint32_t n16, Algo algo,
                                             float scaled_max) noexcept {
  static_assert(FixedL % 16 == 0 && FixedL <= 32);
  constexpr std::uint32_t L = FixedL;
  // Local restrict copies: through the view, every masked store could change the view's own
  // pointers, and GCC reloads them after each one.
  float* __restrict staging = v.staging;
  float* __restrict scale = v.scale;
  float* __restrict ring_base = v.ring;
  std::uint32_t* __restrict ring_head = v.ring_head;
  std::uint32_t* __restrict window_size = v.window_size;
  const __m512 zero = _mm512_setzero_ps(), inf = _mm512_set1_ps(bits_float(0x7F800000u));
  const __m512 fmax = _mm512_set1_ps(float_max), num = _mm512_set1_ps(scaled_max);
  const __m512i ones = _mm512_set1_epi32(1), stale = _mm512_set1_epi32(static_cast<int>(window_stale));
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i none = _mm512_set1_epi32(static_cast<int>(L));
  alignas(64) float w[16];
  // Per slot, the ring position its commit writes: the head, or L (none) for an unused slot, so that
  // each slot's mask is one compare with a broadcast of it. Staged one group ahead: loading a lane
  // right after the vector store of all 16 would wait for the store.
  alignas(64) std::uint32_t positions[2][16];
  const auto stage_positions = [&](std::uint32_t j, std::uint32_t buffer) {
    const __mmask16 used = _mm512_cmp_ps_mask(_mm512_loadu_ps(staging + j), zero, _CMP_NEQ_UQ);
    _mm512_store_si512(positions[buffer], _mm512_mask_mov_epi32(none, used, _mm512_loadu_si512(ring_head + j)));
  };
  if (n16 != 0) stage_positions(0, 0);
  for (std::uint32_t j = 0; j < n16; j += 16) {
    const __m512 c = _mm512_loadu_ps(staging + j);
    const __m512i h = _mm512_loadu_si512(ring_head + j);
    const __mmask16 used = _mm512_cmp_ps_mask(c, zero, _CMP_NEQ_UQ);  // c != 0, NaN included
    const std::uint32_t buffer = (j / 16) & 1;
    const std::uint32_t* at = positions[buffer];
    if (j + 16 < n16) stage_positions(j + 16, buffer ^ 1);
    float* ring = ring_base + static_cast<std::size_t>(j) * L;
    __m512 a[16];
    for (std::uint32_t s = 0; s < 16; ++s) {
      const __m512i pos = _mm512_set1_epi32(static_cast<int>(at[s]));
      const __m512 cs = _mm512_set1_ps(staging[j + s]);
      __m512 m = zero;
      for (std::uint32_t i = 0; i < L; i += 16) {
        float* p = ring + s * L + i;
        const __mmask16 k = _mm512_cmpeq_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int>(i))), pos);
        const __m512 r = _mm512_mask_mov_ps(_mm512_loadu_ps(p), k, cs);
        _mm512_mask_storeu_ps(p, k, r);
        m = max16(r, m);
      }
      a[s] = m;
    }
    _mm512_store_ps(w, reduce16(a));
    for (std::uint32_t s = 0; s < 16; ++s) w[s] = algo(staging[j + s], w[s]);
    const __m512 amax = _mm512_load_ps(w);
    const __m512i next = _mm512_add_epi32(h, ones);
    const __mmask16 wraps = _mm512_cmpeq_epi32_mask(next, _mm512_set1_epi32(static_cast<int>(L)));
    _mm512_storeu_si512(ring_head + j, _mm512_mask_mov_epi32(h, used, _mm512_maskz_mov_epi32(static_cast<__mmask16>(~wraps), next)));
    // The scale pass's rule, while c and the amaxes are in registers: the scale where the slot is
    // used and 0 < amax < inf (both false for NaN), FLT_MAX for an infinite quotient; a used slot's
    // staging reset, an unused one's +-0 kept; the deque marked stale.
    const __mmask16 take = used & _mm512_cmp_ps_mask(amax, zero, _CMP_GT_OQ) & _mm512_cmp_ps_mask(amax, inf, _CMP_LT_OQ);
    const __m512 q = _mm512_mask_min_ps(fmax, 0xFFFF, _mm512_mask_div_ps(num, 0xFFFF, num, amax), fmax);
    _mm512_mask_storeu_ps(scale + j, take, q);
    _mm512_mask_storeu_ps(staging + j, used, zero);
    _mm512_storeu_si512(window_size + j, stale);
  }
}
#endif

/// The host update without the deque, in three loops over the bucket: the slot's ring is the whole
/// state and the deque is marked stale (whatever needs it later rebuilds it from the ring). Same
/// results as delayed_update_slot on every slot. About one slot in ten is unused (c == 0) and which
/// ones is not predictable, so every loop is branch-free: slot-by-slot code with the update's
/// branches spends most of its time in mispredictions.
template <bool UsesWindow, std::uint32_t FixedL = 0, class Algo>
inline void delayed_update_bucket_ring(const delayed_bucket_view& v, Algo algo, delayed_update_args args) noexcept {
  // FixedL: the common history lengths as constants, so the scan of a short ring is straight-line code.
  const std::uint32_t L = FixedL != 0 ? FixedL : v.history_length, n = v.slots;
  float* __restrict staging = v.staging;
  float* __restrict ring = v.ring;
  std::uint32_t* __restrict head = v.ring_head;
  // window_size is scratch until pass 3 marks every deque stale: pass 2 leaves each slot's amax there.
  std::uint32_t* __restrict amax_bits = v.window_size;
#ifdef TEQUANT_DELAYED_AVX512
  if constexpr (!UsesWindow) {
    delayed_update_window_free_avx512(staging, ring, head, v.scale, amax_bits, n, L, algo, args.scaled_max);
    return;
  } else if constexpr (FixedL % 16 == 0 && FixedL != 0 && FixedL <= 32) {
    // Groups of 16 slots in one pass; the slots left over (fewer than 16) by the passes below.
    const std::uint32_t n16 = n & ~15u;
    delayed_update_ring_lines_avx512<FixedL>(v, n16, algo, args.scaled_max);
    if (n16 == n) return;
    delayed_bucket_view rest = v;
    rest.slots = n - n16;
    rest.staging += n16;
    rest.scale += n16;
    rest.ring += static_cast<std::size_t>(n16) * L;
    rest.ring_head += n16;
    rest.window += static_cast<std::size_t>(n16) * L;
    rest.window_front += n16;
    rest.window_size += n16;
    delayed_update_bucket_ring<true, 0>(rest, algo, args);
    return;
  }
#endif
#ifdef TEQUANT_DELAYED_AVX512
  delayed_commit_avx512(staging, ring, head, n, L);  // pass 1
#else
  // Short rings share lines and stay in the cache: a conditional store would be a branch, so an
  // unused slot rewrites the entry it would have overwritten and keeps its head (the mask goes
  // through an empty asm so that GCC does not turn the blend back into a conditional store). Long
  // rings (most_recent's) each sit on a page of their own: there the blend's read of the entry is a
  // miss that holds its store in the store queue and stalls the loop, and the branch on the amax ran
  // faster (most_recent, 1,000 and 10,000 slots at L = 1024, portable build on Zen 4: 3.40 -> 1.83
  // and 56.8 -> 41.8 us; at L = 16 the branch was slower with 10,000 slots, 21.9 -> 23.5).
  const auto commit = [&](auto branch_on_amax) {  // pass 1, one loop for each rule
    for (std::uint32_t j = 0; j < n; ++j) {
      const float c = staging[j];
      const std::uint32_t h = head[j], next = h + 1 == L ? 0 : h + 1;
      float* entry = ring + static_cast<std::size_t>(j) * L + h;
#if defined(__GNUC__) || defined(__clang__)
      if constexpr (!decltype(branch_on_amax)::value) {
        std::uint32_t used = c != 0.0f ? 0xFFFFFFFFu : 0u;
        __asm__("" : "+r"(used));
        *entry = bits_float((float_bits(c) & used) | (float_bits(*entry) & ~used));
        head[j] = (next & used) | (h & ~used);
      } else
#endif
      if (c != 0.0f) {
        *entry = c;
        head[j] = next;
      }
      if constexpr (!UsesWindow) amax_bits[j] = float_bits(algo(c, 0.0f));
    }
  };
  if (L > window_scan_max_length) commit(std::true_type{});
  else commit(std::false_type{});
#endif
  // Pass 2: the amax each scale comes from. The window scans read rings committed a whole pass
  // earlier: scanning a line right after a narrow store into it would wait for that store.
  if constexpr (UsesWindow) {
    std::uint32_t j = 0;
#ifdef TEQUANT_DELAYED_SSE2
    if constexpr (FixedL != 0 && FixedL % 4 == 0) {
      // Rings of a fixed length: the maxima of 16 (AVX-512) or 4 slots at once, reduced across the
      // slots' vectors instead of one horizontal reduction per slot.
      alignas(64) float w[16];
#ifdef TEQUANT_DELAYED_AVX512
      if constexpr (FixedL % 16 == 0) {
        for (; j + 16 <= n; j += 16) {
          _mm512_store_ps(w, ring_max16<FixedL>(ring + static_cast<std::size_t>(j) * L));
          for (std::uint32_t s = 0; s < 16; ++s) amax_bits[j + s] = float_bits(algo(staging[j + s], w[s]));
        }
      }
#endif
      for (; j + 4 <= n; j += 4) {
        _mm_store_ps(w, ring_max4<FixedL>(ring + static_cast<std::size_t>(j) * L));
        for (std::uint32_t s = 0; s < 4; ++s) amax_bits[j + s] = float_bits(algo(staging[j + s], w[s]));
      }
    }
#endif
    for (; j < n; ++j)
      amax_bits[j] = float_bits(algo(staging[j], ring_max_host<FixedL>(ring + static_cast<std::size_t>(j) * L, L)));
  }
  // Pass 3: the scales; pass 2 left each slot's amax in window_size, which becomes "stale" again.
  delayed_scale_pass<true>(v.staging, v.scale, amax_bits, n, args.scaled_max);
}

/// Ordering key of a committed amax in the suffix maxima (unsigned): its bits when it is a positive
/// non-NaN float (inf included), else 0. An unsigned max of these from 0 is the bits of the fmaxf
/// chain from 0.
inline std::uint32_t window_ukey(float f) noexcept {
  const std::uint32_t k = float_bits(f);
  return k <= 0x7F800000u ? k : 0u;
}

/// Puts slot j's window storage in suffix form (see delayed_update_bucket_suffix) from its ring alone:
/// suffix maxima of the positions the ring head has not yet reached since it last wrapped, and the
/// maximum of those it has passed.
inline void build_window_suffix(const delayed_bucket_view& v, std::uint32_t j) noexcept {
  const std::uint32_t L = v.history_length, h = v.ring_head[j];
  const std::size_t base = static_cast<std::size_t>(j) * L;
  const float* ring = v.ring + base;
  std::uint32_t* suffix = v.window + base;
  std::uint32_t p = L;
  // Vector blocks from the end, each a suffix scan within the block (as floats: maxps(x, +0) is the
  // key of x as a float, and the maximum of non-NaN floats >= +0 is the float of the keys' maximum)
  // combined with the running maximum of the later blocks; the positions left over go one by one.
#if defined(TEQUANT_DELAYED_AVX512)
  const __m512 zero16 = _mm512_setzero_ps();
  __m512 carry16 = zero16;
  const __m512i lane0 = _mm512_setzero_si512();
  for (; p - h >= 16; p -= 16) {
    __m512 t = max16(_mm512_loadu_ps(ring + p - 16), zero16);
    // Lane i takes the maximum of lanes i..15 (lanes shifted down, zeros shifted in at the top).
    t = max16(t, shift_down<1>(t));
    t = max16(t, shift_down<2>(t));
    t = max16(t, shift_down<4>(t));
    t = max16(t, shift_down<8>(t));
    // The block's scan does not depend on the carry: the carry's chain is one max per block.
    _mm512_storeu_ps(reinterpret_cast<float*>(suffix + p - 16), max16(t, carry16));
    carry16 = max16(_mm512_mask_permutexvar_ps(t, 0xFFFF, lane0, t), carry16);
  }
  std::uint32_t m = float_bits(_mm512_cvtss_f32(carry16));
#elif defined(TEQUANT_DELAYED_SSE2)
  const __m128 zero4 = _mm_setzero_ps();
  __m128 carry4 = zero4;
  for (; p - h >= 4; p -= 4) {
    __m128 t = _mm_max_ps(_mm_loadu_ps(ring + p - 4), zero4);
    t = _mm_max_ps(t, _mm_castsi128_ps(_mm_srli_si128(_mm_castps_si128(t), 4)));
    t = _mm_max_ps(t, _mm_castsi128_ps(_mm_srli_si128(_mm_castps_si128(t), 8)));
    _mm_storeu_ps(reinterpret_cast<float*>(suffix + p - 4), _mm_max_ps(t, carry4));  // carry off the scan's chain
    carry4 = _mm_max_ps(_mm_shuffle_ps(t, t, 0), carry4);
  }
  std::uint32_t m = float_bits(_mm_cvtss_f32(carry4));
#else
  std::uint32_t m = 0;
#endif
  while (p-- > h) {
    const std::uint32_t k = window_ukey(ring[p]);
    m = k > m ? k : m;
    suffix[p] = m;
  }
  v.window_front[j] = float_bits(ring_max_host<0>(ring, h));  // the maximum of [0, h): its key
  v.window_size[j] = window_suffix;
}

#ifdef TEQUANT_DELAYED_AVX512
/// The suffix-form update of slots [j, j+16) (see delayed_update_bucket_suffix), 16 lanes at once: the
/// commit a masked scatter, the suffix maximum one past the head a masked gather. Leaves the window
/// maxima (keys) in wmax; the scales are left to the caller. The same values as the one-slot code.
inline void delayed_suffix_update16(const delayed_bucket_view& v, std::uint32_t j, std::uint32_t* wmax) noexcept {
  const std::uint32_t L = v.history_length;
  const __m512i stride = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(static_cast<int>(L)));
  {  // slots whose window storage is not in suffix form yet (rare: the first update, after a deque)
    const __m512i ws = _mm512_loadu_si512(v.window_size + j);
    std::uint32_t unbuilt = _mm512_cmpneq_epu32_mask(ws, _mm512_set1_epi32(static_cast<int>(window_suffix)));
    for (; unbuilt != 0; unbuilt &= unbuilt - 1) build_window_suffix(v, j + static_cast<std::uint32_t>(__builtin_ctz(unbuilt)));
  }
  {  // the two lines a later group will touch, on pages of their own (the first touch is a TLB miss)
    constexpr std::uint32_t ahead = 32;
    const std::uint32_t n = v.slots;
    for (std::uint32_t p = j + ahead, e = p + 16 < n ? p + 16 : n; p < e; ++p) {
      const std::uint32_t hp = v.ring_head[p];
      const std::size_t b = static_cast<std::size_t>(p) * L;
      __builtin_prefetch(v.ring + b + hp, 1);
      __builtin_prefetch(v.window + b + (hp + 1 < L ? hp + 1 : hp), 0);
    }
  }
  const std::size_t base = static_cast<std::size_t>(j) * L;
  const __m512 c = _mm512_loadu_ps(v.staging + j);
  const __m512i ci = _mm512_castps_si512(c);
  const __m512i h = _mm512_loadu_si512(v.ring_head + j);
  const __m512i next = _mm512_add_epi32(h, _mm512_set1_epi32(1));
  const __m512i zero = _mm512_setzero_si512();
  const __mmask16 used = _mm512_cmp_ps_mask(c, _mm512_setzero_ps(), _CMP_NEQ_UQ);  // c != 0, NaN included
  const __mmask16 inside = _mm512_cmplt_epu32_mask(next, _mm512_set1_epi32(static_cast<int>(L)));
  const __m512i old = _mm512_mask_i32gather_epi32(zero, inside, _mm512_add_epi32(stride, next), v.window + base, 4);
  _mm512_mask_i32scatter_ps(v.ring + base, used, _mm512_add_epi32(stride, h), c, 4);
  const __m512i kc = _mm512_maskz_mov_epi32(_mm512_cmple_epu32_mask(ci, _mm512_set1_epi32(0x7F800000)), ci);
  const __m512i pre = maxu16(kc, _mm512_loadu_si512(v.window_front + j));  // unused: kc = 0
  _mm512_storeu_si512(wmax, maxu16(pre, old));
  _mm512_storeu_si512(v.window_front + j, pre);  // a wrapping slot's is rebuilt below
  _mm512_storeu_si512(v.ring_head + j, _mm512_mask_mov_epi32(h, used, _mm512_maskz_mov_epi32(inside, next)));
  // The heads that wrap: this round's commits become the old ones.
  for (std::uint32_t wrap = used & static_cast<__mmask16>(~inside); wrap != 0; wrap &= wrap - 1)
    build_window_suffix(v, j + static_cast<std::uint32_t>(__builtin_ctz(wrap)));
}
#endif

/// The host update of long windows (van Herk / Gil-Werman). Since slot j's ring head last wrapped to
/// 0, positions [0, head) hold new commits and [head, L) the previous round's. The window max is
/// max(max of [0, head], max of [head + 1, L)): the first is a running maximum (window_front[j]),
/// the second a suffix maximum computed once per round when the head wraps (window[j*L + p], O(L)
/// once per L commits, vectorised). An update reads and writes two adjacent positions of two arrays
/// and nothing data-dependent, where the deque's pops chase ring positions through it. The maxima are
/// of the ordering keys (window_ukey), so the result is the scan's float bit for bit. Unused slots
/// (c == 0, unpredictable) go through the same branch-free code and change nothing. With AVX-512, 16
/// slots at a time (delayed_suffix_update16); the slots left over one at a time.
template <class Algo>
inline void delayed_update_bucket_suffix(const delayed_bucket_view& v, Algo algo, delayed_update_args args) noexcept {
  // Slots are updated in chunks whose amaxes stay on the stack for the vectorised scale pass. Each
  // slot's ring and suffix lines sit on pages of their own: they are prefetched a few slots ahead to
  // overlap the cache and TLB misses.
  constexpr std::uint32_t chunk = 64, ahead = 16;
  const std::uint32_t L = v.history_length, n = v.slots;
  const float* __restrict staging = v.staging;
  std::uint32_t* __restrict head = v.ring_head;
  std::uint32_t* __restrict front = v.window_front;
  std::uint32_t amax_bits[chunk];
  for (std::uint32_t j0 = 0; j0 < n; j0 += chunk) {
    const std::uint32_t count = n - j0 < chunk ? n - j0 : chunk;
    std::uint32_t k = 0;
#ifdef TEQUANT_DELAYED_AVX512
    for (; k + 16 <= count; k += 16) {
      const std::uint32_t j = j0 + k;
      delayed_suffix_update16(v, j, amax_bits + k);
      for (std::uint32_t s = 0; s < 16; ++s) amax_bits[k + s] = float_bits(algo(staging[j + s], bits_float(amax_bits[k + s])));
    }
#endif
    for (; k < count; ++k) {
      const std::uint32_t j = j0 + k;
#if defined(__GNUC__) || defined(__clang__)
      if (j + ahead < n) {
        const std::uint32_t p = j + ahead, hp = head[p];
        const std::size_t base = static_cast<std::size_t>(p) * L;
        __builtin_prefetch(v.ring + base + hp, 1);
        __builtin_prefetch(v.window + base + (hp + 1 < L ? hp + 1 : hp), 0);
      }
#endif
      if (v.window_size[j] != window_suffix) [[unlikely]] build_window_suffix(v, j);
      const std::size_t base = static_cast<std::size_t>(j) * L;
      float* ring = v.ring + base;
      const std::uint32_t* suffix = v.window + base;
      const float c = staging[j];
      const std::uint32_t h = head[j], next = h + 1;
      std::uint32_t used = c != 0.0f ? 0xFFFFFFFFu : 0u;
#if defined(__GNUC__) || defined(__clang__)
      __asm__("" : "+r"(used));  // keeps the blends below from becoming branches
#endif
      ring[h] = bits_float((float_bits(c) & used) | (float_bits(ring[h]) & ~used));
      const std::uint32_t kc = window_ukey(c), pre0 = front[j];
      const std::uint32_t pre = kc > pre0 ? kc : pre0;  // an unused slot's key is 0: pre == pre0
      const std::uint32_t last = next < L ? 0xFFFFFFFFu : 0u;
      const std::uint32_t old = suffix[next < L ? next : h] & last;
      amax_bits[k] = float_bits(algo(c, bits_float(pre > old ? pre : old)));
      if ((used & ~last) != 0) [[unlikely]] {  // the head wraps: this round's commits become the old ones
        head[j] = 0;
        build_window_suffix(v, j);
      } else {
        head[j] = (next & used) | (h & ~used);
        front[j] = pre;
      }
    }
    delayed_scale_pass<false>(v.staging + j0, v.scale + j0, amax_bits, count, args.scaled_max);
  }
}

}  // namespace detail

/// Whole-bucket update on host memory (the host backend's update_delayed calls this). Short windows
/// and window-free algorithms go through the ring alone (see delayed_update_bucket_ring), long windows
/// through the ring and its suffix maxima (see delayed_update_bucket_suffix). The deque that
/// delayed_update_slot keeps is not used here; the suffix form and the deque each rebuild themselves
/// from the ring when they find the other (or none) in the window storage.
template <class Algo>
inline void delayed_update_bucket_host(const delayed_bucket_view& v, Algo algo, delayed_update_args args) noexcept {
  const std::uint32_t L = v.history_length;
  if constexpr (!algo_uses_window<Algo>) {
    detail::delayed_update_bucket_ring<false>(v, algo, args);
  } else if (L <= window_scan_max_length) {
    if (L == 16) detail::delayed_update_bucket_ring<true, 16>(v, algo, args);
    else if (L == 32) detail::delayed_update_bucket_ring<true, 32>(v, algo, args);
    else detail::delayed_update_bucket_ring<true>(v, algo, args);
  } else {
    detail::delayed_update_bucket_suffix(v, algo, args);
  }
}

/// Writes slots [first, first+count) of a HOST-accessible view in TE's [L, count] layout (row-major,
/// row 0 = staging, rows 1..L-1 = the last L-1 commits, oldest first).
inline void export_te_history(const delayed_bucket_view& v, std::uint32_t first, std::uint32_t count,
                              std::span<float> out) {
  const std::uint32_t L = v.history_length;
  detail::require(static_cast<std::size_t>(first) + count <= v.slots, "export_te_history: slots [", first, ", ",
                  first + count, ") out of range (bucket has ", v.slots, " slots)");
  detail::require(out.size() == static_cast<std::size_t>(L) * count, "export_te_history: output has ", out.size(),
                  " floats, the [L, n] history needs L*n = ", static_cast<std::size_t>(L) * count);
  for (std::uint32_t k = 0; k < count; ++k) {
    const std::uint32_t j = first + k;
    const float* ring = v.ring + static_cast<std::size_t>(j) * L;
    const std::uint32_t head = v.ring_head[j];
    out[k] = v.staging[j];
    for (std::uint32_t r = 1; r < L; ++r) {
      std::uint32_t p = head + r;  // (head - L + r) mod L
      if (p >= L) p -= L;
      out[static_cast<std::size_t>(r) * count + k] = ring[p];
    }
  }
}

/// Loads TE's [L, count] history into slots [first, first+count) of a HOST-accessible view. The
/// ring entry that TE does not store (the L-th oldest commit) is set to 0: it leaves the window
/// before any later update reads it.
inline void import_te_history(const delayed_bucket_view& v, std::uint32_t first, std::uint32_t count,
                              std::span<const float> in) {
  const std::uint32_t L = v.history_length;
  detail::require(static_cast<std::size_t>(first) + count <= v.slots, "import_te_history: slots [", first, ", ",
                  first + count, ") out of range (bucket has ", v.slots, " slots)");
  detail::require(in.size() == static_cast<std::size_t>(L) * count, "import_te_history: input has ", in.size(),
                  " floats, the [L, n] history needs L*n = ", static_cast<std::size_t>(L) * count,
                  " (history_length ", L, ")");
  for (std::uint32_t k = 0; k < count; ++k) {
    const std::uint32_t j = first + k;
    v.ring_head[j] = 0;
    v.window_front[j] = 0;
    v.window_size[j] = 0;
    detail::delayed_ring_push(v, j, 0.0f);
    for (std::uint32_t r = 1; r < L; ++r) detail::delayed_ring_push(v, j, in[static_cast<std::size_t>(r) * count + k]);
    v.staging[j] = in[k];
  }
}

/// Owning delayed-scaling state of one bucket, storage from `Backend` (make_buffer / copy / fill /
/// download / upload / read / max_accumulate / update_delayed). Slots start with scale 1, history 0.
template <class Backend>
class delayed_bucket {
 public:
  template <class T>
  using buffer_type = decltype(std::declval<Backend&>().template make_buffer<T>(std::size_t{}));

  explicit delayed_bucket(std::uint32_t history_length, Backend backend = {}) : backend_(std::move(backend)), L_(history_length) {
    detail::require(history_length >= 1 && history_length <= max_history_length, "delayed_bucket: history_length ",
                    history_length, " must be in [1, ", max_history_length, "]");
  }

  static constexpr std::uint32_t max_history_length = delayed_max_history_length;

  std::uint32_t size() const noexcept { return n_; }
  std::uint32_t history_length() const noexcept { return L_; }
  Backend& backend() noexcept { return backend_; }

  /// Adds one slot (scale 1, empty history, staging 0) and returns its index. Strong guarantee.
  std::uint32_t add_slot() {
    if (n_ == cap_) grow(cap_ == 0 ? 8 : cap_ * 2);
    const std::uint32_t j = n_;
    backend_.fill(staging_.data() + j, 1, 0.0f);
    backend_.fill(scale_.data() + j, 1, 1.0f);
    backend_.fill(ring_.data() + static_cast<std::size_t>(j) * L_, L_, 0.0f);
    backend_.fill(head_.data() + j, 1, std::uint32_t{0});
    backend_.fill(front_.data() + j, 1, std::uint32_t{0});
    backend_.fill(wsize_.data() + j, 1, std::uint32_t{0});
    ++n_;
    return j;
  }

  /// The kernel/host-loop view; pointers stay valid until the next add_slot.
  delayed_bucket_view view() noexcept {
    return {n_, L_, staging_.data(), scale_.data(), ring_.data(), head_.data(), window_.data(), front_.data(), wsize_.data()};
  }

  /// Contiguous staging amaxes of all slots: the buffer the MAX all-reduce works on in place.
  std::span<float> staging() noexcept { return {staging_.data(), n_}; }
  /// Where casts of slot j max-accumulate their amax.
  float* staging_ptr(std::uint32_t j) { check(j, "staging_ptr"); return staging_.data() + j; }
  /// The scale a cast of slot j multiplies by (backend memory: the cast reads it without a sync).
  const float* scale_ptr(std::uint32_t j) const { check(j, "scale_ptr"); return scale_.data() + j; }
  float* scale_data() noexcept { return scale_.data(); }
  const float* scale_data() const noexcept { return scale_.data(); }

  float scale(std::uint32_t j) const { check(j, "scale"); return backend_.read(scale_.data() + j); }
  float staging_amax(std::uint32_t j) const { check(j, "staging_amax"); return backend_.read(staging_.data() + j); }
  void set_scale(std::uint32_t j, float s) { check(j, "set_scale"); backend_.fill(scale_.data() + j, 1, s); }

  /// Max-accumulates an amax observed outside a backend cast (NaN ignored, never overwrites).
  void record_amax(std::uint32_t j, float amax) { check(j, "record_amax"); backend_.max_accumulate(staging_.data() + j, amax); }

  /// One pass over the bucket (after the staging amaxes were reduced).
  template <class Algo>
  void update(Algo algo, delayed_update_args args) { backend_.update_delayed(view(), algo, args); }

  /// TE's [L, count] layout for slots [first, first+count); see export_te_history.
  void export_te_history(std::uint32_t first, std::uint32_t count, std::span<float> out) const {
    with_host_copy([&](const delayed_bucket_view& hv) { tequant::export_te_history(hv, first, count, out); }, false);
  }
  void import_te_history(std::uint32_t first, std::uint32_t count, std::span<const float> in) {
    detail::require(static_cast<std::size_t>(first) + count <= n_, "import_te_history: slots [", first, ", ",
                    first + count, ") out of range (bucket has ", n_, " slots)");
    detail::require(in.size() == static_cast<std::size_t>(L_) * count, "import_te_history: input has ", in.size(),
                    " floats, the [L, n] history needs L*n = ", static_cast<std::size_t>(L_) * count,
                    " (history_length ", L_, ")");
    const_cast<delayed_bucket*>(this)->with_host_copy(
        [&](const delayed_bucket_view& hv) { tequant::import_te_history(hv, first, count, in); }, true);
  }

 private:
  void check(std::uint32_t j, const char* what) const {
    detail::require(j < n_, "delayed_bucket::", what, ": slot ", j, " out of range (bucket has ", n_, " slots)");
  }

  void grow(std::uint32_t cap) {
    detail::require(static_cast<std::size_t>(cap) * L_ <= (std::size_t{1} << 40), "delayed_bucket: too many slots");
    const std::size_t ncap = cap, rcap = static_cast<std::size_t>(cap) * L_;
    auto staging = backend_.template make_buffer<float>(ncap);
    auto scale = backend_.template make_buffer<float>(ncap);
    auto ring = backend_.template make_buffer<float>(rcap);
    auto head = backend_.template make_buffer<std::uint32_t>(ncap);
    auto window = backend_.template make_buffer<std::uint32_t>(rcap);
    auto front = backend_.template make_buffer<std::uint32_t>(ncap);
    auto wsize = backend_.template make_buffer<std::uint32_t>(ncap);
    const std::size_t n = n_, rn = static_cast<std::size_t>(n_) * L_;
    if (n != 0) {
      backend_.copy(staging.data(), staging_.data(), n);
      backend_.copy(scale.data(), scale_.data(), n);
      backend_.copy(ring.data(), ring_.data(), rn);
      backend_.copy(head.data(), head_.data(), n);
      backend_.copy(window.data(), window_.data(), rn);
      backend_.copy(front.data(), front_.data(), n);
      backend_.copy(wsize.data(), wsize_.data(), n);
    }
    staging_ = std::move(staging);
    scale_ = std::move(scale);
    ring_ = std::move(ring);
    head_ = std::move(head);
    window_ = std::move(window);
    front_ = std::move(front);
    wsize_ = std::move(wsize);
    cap_ = cap;
  }

  // Runs f on a host copy of the state (or on the state itself when the backend's memory is host
  // memory) and writes the copy back when `write_back`.
  template <class F>
  void with_host_copy(F&& f, bool write_back) const {
    auto* self = const_cast<delayed_bucket*>(this);
    if constexpr (Backend::host_accessible) {
      f(self->view());
    } else {
      const std::size_t n = n_, rn = static_cast<std::size_t>(n_) * L_;
      std::vector<float> staging(n), scale(n), ring(rn);
      std::vector<std::uint32_t> head(n), window(rn), front(n), wsize(n);
      backend_.download(staging.data(), staging_.data(), n);
      backend_.download(scale.data(), scale_.data(), n);
      backend_.download(ring.data(), ring_.data(), rn);
      backend_.download(head.data(), head_.data(), n);
      backend_.download(window.data(), window_.data(), rn);
      backend_.download(front.data(), front_.data(), n);
      backend_.download(wsize.data(), wsize_.data(), n);
      f(delayed_bucket_view{n_, L_, staging.data(), scale.data(), ring.data(), head.data(), window.data(), front.data(),
                            wsize.data()});
      if (write_back) {
        self->backend_.upload(self->staging_.data(), staging.data(), n);
        self->backend_.upload(self->ring_.data(), ring.data(), rn);
        self->backend_.upload(self->head_.data(), head.data(), n);
        self->backend_.upload(self->window_.data(), window.data(), rn);
        self->backend_.upload(self->front_.data(), front.data(), n);
        self->backend_.upload(self->wsize_.data(), wsize.data(), n);
      }
    }
  }

  TEQUANT_NO_UNIQUE_ADDRESS Backend backend_;
  std::uint32_t L_;
  std::uint32_t n_ = 0;
  std::uint32_t cap_ = 0;
  buffer_type<float> staging_{}, scale_{}, ring_{};
  buffer_type<std::uint32_t> head_{}, window_{}, front_{}, wsize_{};
};

}  // namespace tequant
