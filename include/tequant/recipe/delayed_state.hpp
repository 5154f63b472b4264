// SPDX-License-Identifier: Apache-2.0
// Delayed-scaling state of one bucket as a struct of arrays, and TE's fused per-slot update on it.
//
// TE keeps an [L, n] history and rolls all L rows on every update (O(n*L) memory traffic). Here each
// slot has a ring of its last L committed amaxes plus a monotonic deque of ring positions whose values
// decrease from front to back, so the window maximum is the deque front and one update touches O(1)
// memory per slot whatever L is (amortised: each commit enters and leaves the deque once).
//
// Why a ring of L and not L-1: TE's max window at an update is the current amax plus the L-1 rows it
// has committed before, and TE stores only those L-1 rows (row 0 is the staging amax). Pushing the
// current amax into a ring of the last L commits and taking the max of the ring is exactly that window.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"

#if (defined(__SSE2__) || defined(_M_X64)) && !defined(__CUDA_ARCH__)
#include <emmintrin.h>
#define TEQUANT_DELAYED_SSE2 1
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
  if (v.window_size[j] == window_stale) [[unlikely]] rebuild_window(v, j);
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
  if (v.window_size[j] == window_stale) [[unlikely]] return window_scan_max(v.ring + base, v.history_length);
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
  for (std::uint32_t j = 0; j < n; ++j) {
    // Pass 1 commits. With AVX-512 GCC turns the conditional store into a masked scatter. Without
    // it, it would be a branch: there an unused slot rewrites the entry it would have overwritten
    // and keeps its head, and the mask goes through an empty asm so that GCC does not turn the
    // blend back into a conditional store.
    const float c = staging[j];
    const std::uint32_t h = head[j], next = h + 1 == L ? 0 : h + 1;
    float* entry = ring + static_cast<std::size_t>(j) * L + h;
#if defined(__AVX512F__) || !(defined(__GNUC__) || defined(__clang__))
    if (c != 0.0f) {
      *entry = c;
      head[j] = next;
    }
#else
    std::uint32_t used = c != 0.0f ? 0xFFFFFFFFu : 0u;
    __asm__("" : "+r"(used));
    *entry = bits_float((float_bits(c) & used) | (float_bits(*entry) & ~used));
    head[j] = (next & used) | (h & ~used);
#endif
    if constexpr (!UsesWindow) amax_bits[j] = float_bits(algo(c, 0.0f));
  }
  // Pass 2: the amax each scale comes from. The window scans read rings committed a whole pass
  // earlier: scanning a line right after a narrow store into it would wait for that store.
  if constexpr (UsesWindow) {
    for (std::uint32_t j = 0; j < n; ++j)
      amax_bits[j] = float_bits(algo(staging[j], ring_max_host<FixedL>(ring + static_cast<std::size_t>(j) * L, L)));
  }
  // Pass 3: scale = scaled_max / a (FLT_MAX for inf) where the slot is used and a is finite and > 0;
  // a used slot's staging is reset, an unused one keeps its +-0.
  float* __restrict scale = v.scale;
  const float scaled_max = args.scaled_max;
  std::uint32_t j = 0;
#if defined(TEQUANT_DELAYED_SSE2) && !defined(__AVX512F__)  // with AVX-512 the loop below vectorises 16-wide
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
    _mm_storeu_si128(reinterpret_cast<__m128i*>(amax_bits + j), stale);
  }
#endif
  for (; j < n; ++j) {
    const float c = staging[j], a = bits_float(amax_bits[j]);
    float s = div_rn(scaled_max, a);
    s = is_inf(s) ? float_max : s;
    scale[j] = c != 0.0f && is_finite(a) && a > 0.0f ? s : scale[j];
    staging[j] = c == 0.0f ? c : 0.0f;
    amax_bits[j] = window_stale;
  }
}

}  // namespace detail

/// Whole-bucket update on host memory (the host backend's update_delayed calls this). Short windows
/// and window-free algorithms go through the ring alone (see delayed_update_bucket_ring).
/// With a long window each slot's ring and deque sit on their own pages, so the few lines one update
/// touches per slot are prefetched a few slots ahead to overlap the cache and TLB misses. Short windows
/// (all rings together a few hundred KB at most per 1000 slots) stay in cache, and there the prefetch
/// only costs (about 10% at L = 16, 10000 slots).
template <class Algo>
inline void delayed_update_bucket_host(const delayed_bucket_view& v, Algo algo, delayed_update_args args) noexcept {
  constexpr std::uint32_t ahead = 8, min_prefetch_length = 256;
  const std::uint32_t L = v.history_length;
  if constexpr (!algo_uses_window<Algo>) {
    detail::delayed_update_bucket_ring<false>(v, algo, args);
    return;
  }
  if (L <= window_scan_max_length) {
    if (L == 16) detail::delayed_update_bucket_ring<true, 16>(v, algo, args);
    else if (L == 32) detail::delayed_update_bucket_ring<true, 32>(v, algo, args);
    else detail::delayed_update_bucket_ring<true>(v, algo, args);
    return;
  }
  const bool prefetch = L >= min_prefetch_length;
  for (std::uint32_t j = 0; j < v.slots; ++j) {
#if defined(__GNUC__) || defined(__clang__)
    if (prefetch && j + ahead < v.slots && v.window_size[j + ahead] != detail::window_stale) {
      const std::uint32_t p = j + ahead;
      const std::size_t base = static_cast<std::size_t>(p) * L;
      std::uint32_t back = v.window_front[p] + v.window_size[p];
      if (back >= L) back -= L;
      __builtin_prefetch(v.ring + base + v.ring_head[p], 1);
      __builtin_prefetch(v.window + base + v.window_front[p], 0);
      __builtin_prefetch(v.window + base + back, 1);
    }
#endif
    delayed_update_slot(v, j, v.staging[j], algo, args);
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
