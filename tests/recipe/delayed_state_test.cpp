// SPDX-License-Identifier: Apache-2.0
// tequant's ring + deque delayed update against the roll-based TE reference, bit for bit.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "recipe/te_roll_reference.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/persistence/bytes.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/delayed_io.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace {

using bucket = tequant::delayed_bucket<tequant::host_backend>;

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

// Amax sequences that exercise the edges: zeros (slot unused), -0, NaN, inf, denormals, tiny values
// whose scale overflows, huge values, ties, and long monotone runs (deque growth and expiry).
struct amax_source {
  std::mt19937 rng;
  float last = 1.0f;
  explicit amax_source(unsigned seed) : rng(seed) {}
  float next() {
    const unsigned k = rng() % 100;
    const float inf = std::numeric_limits<float>::infinity();
    if (k < 25) return 0.0f;
    if (k < 27) return -0.0f;
    if (k < 29) return std::numeric_limits<float>::quiet_NaN();
    if (k < 30) return inf;
    if (k < 32) return std::bit_cast<float>(static_cast<std::uint32_t>(1 + rng() % 0x7FFFFF));  // denormal
    if (k < 34) return std::numeric_limits<float>::min();
    if (k < 36) return 3.0e38f;
    if (k < 40) return last;  // tie with the previous value
    if (k < 55) return last = last * 0.97f;  // decreasing runs fill the deque
    if (k < 65) return last = last * 1.05f;
    std::uniform_real_distribution<float> e(-20.0f, 20.0f);
    return last = std::exp2(e(rng));
  }
};

float scaled_max(int margin) { return tequant::delayed_scaling<>::scaled_max(tequant::fp8_dtype::e4m3, margin); }

template <class Algo>
void run_against_roll(std::uint32_t L, int margin, te_roll::algo ref_algo, unsigned seed, std::uint32_t steps,
                      std::uint32_t n = 6, bool reimport = false) {
  bucket b(L);
  for (std::uint32_t j = 0; j < n; ++j) CHECK(b.add_slot() == j);
  te_roll::state ref(n, L);
  amax_source src(seed);
  std::vector<float> exported(std::size_t{L} * n);
  const tequant::delayed_update_args args{scaled_max(margin)};
  for (std::uint32_t step = 0; step < steps; ++step) {
    for (std::uint32_t j = 0; j < n; ++j) {
      const float c = src.next();
      b.staging()[j] = c;  // what the all-reduce leaves in the staging buffer
      ref.row(0)[j] = c;
    }
    if (reimport && step % 37 == 5) {
      // Two slots through TE's layout and back: their window storage becomes a deque, which the
      // host's long-window update lays out differently (the whole bucket's must be rebuilt).
      std::vector<float> two(std::size_t{L} * 2);
      b.export_te_history(3, 2, two);
      b.import_te_history(3, 2, two);
    }
    b.update(Algo{}, args);
    ref.update(ref_algo, args.scaled_max);
    bool scales_equal = true;
    for (std::uint32_t j = 0; j < n; ++j) scales_equal = scales_equal && same_bits(b.scale(j), ref.scale[j]);
    REQUIRE_MESSAGE(scales_equal, "L=", L, " margin=", margin, " step=", step);
    // The full export is O(n*L); check it every step for short windows and periodically for long ones.
    if (L <= 16 || step % 97 == 0 || step + 1 == steps) {
      b.export_te_history(0, n, exported);
      REQUIRE_MESSAGE(std::memcmp(exported.data(), ref.history.data(), exported.size() * sizeof(float)) == 0,
                      "history differs at L=", L, " step=", step);
    }
  }
}

// One bucket updated by most_recent and max in turn: most_recent and short windows leave the deque
// stale on the host; a long-window max update rebuilds it from the ring, and must then act as if it
// had been kept all along.
void run_mixed_against_roll(std::uint32_t L, unsigned seed, std::uint32_t steps) {
  const std::uint32_t n = 5;
  bucket b(L);
  for (std::uint32_t j = 0; j < n; ++j) b.add_slot();
  te_roll::state ref(n, L);
  amax_source src(seed);
  std::mt19937 pick(seed + 1);
  const tequant::delayed_update_args args{448.0f};
  for (std::uint32_t step = 0; step < steps; ++step) {
    for (std::uint32_t j = 0; j < n; ++j) b.staging()[j] = ref.row(0)[j] = src.next();
    const bool recent = (step / 7 + pick() % 2) % 2 == 0;  // runs of either algorithm, then switches
    if (recent) b.update(tequant::most_recent{}, args);
    else b.update(tequant::window_max{}, args);
    ref.update(recent ? te_roll::algo::most_recent : te_roll::algo::max, args.scaled_max);
    bool equal = true;
    for (std::uint32_t j = 0; j < n; ++j) {
      equal = equal && same_bits(b.scale(j), ref.scale[j]);
      const auto v = b.view();
      float want = 0.0f;  // the window max as an fmaxf chain from 0 over the ring (TE's rows + current)
      for (std::uint32_t k = 0; k < L; ++k) want = std::fmax(want, v.ring[std::size_t{j} * L + k]);
      equal = equal && same_bits(tequant::detail::delayed_window_max(v, j), want == 0.0f ? 0.0f : want);
    }
    REQUIRE_MESSAGE(equal, "L=", L, " step=", step);
  }
}

}  // namespace

TEST_CASE("switching between most_recent and max keeps the window exact (stale deque rebuilt from the ring)") {
  for (std::uint32_t L : {1u, 16u, 64u, 65u, 300u}) {
    CAPTURE(L);
    run_mixed_against_roll(L, 31 + L, 4 * L + 60);
  }
}

TEST_CASE("delayed update equals TE's roll-based fused update bit for bit") {
  for (std::uint32_t L : {1u, 2u, 3u, 16u, 63u, 64u, 65u, 1024u}) {
    const std::uint32_t steps = L == 1024 ? 3 * L + 100 : 600;
    for (int margin = 0; margin <= 3; ++margin) {
      CAPTURE(L);
      CAPTURE(margin);
      run_against_roll<tequant::window_max>(L, margin, te_roll::algo::max, 1000 * L + margin, steps);
      run_against_roll<tequant::most_recent>(L, margin, te_roll::algo::most_recent, 7 + 1000 * L + margin, steps);
    }
  }
}

// The host update takes the window maxima of fixed-length rings 16 (AVX-512) or 4 slots at a time and
// long windows in chunks of 64 slots: 150 slots have full groups, a partial chunk and a scalar tail.
TEST_CASE("delayed update equals TE's roll with many slots (grouped window maxima, chunked long windows)") {
  for (std::uint32_t L : {16u, 32u, 48u, 65u, 1024u}) {
    CAPTURE(L);
    run_against_roll<tequant::window_max>(L, 0, te_roll::algo::max, 77 + L, L == 1024 ? 2 * L + 300 : 400, 150);
  }
}

TEST_CASE("delayed update equals TE's roll when some slots' history is re-imported between updates") {
  for (std::uint32_t L : {16u, 65u, 80u, 300u}) {
    CAPTURE(L);
    run_against_roll<tequant::window_max>(L, 1, te_roll::algo::max, 91 + L, 3 * L + 100, 40, true);
  }
}

// The whole-bucket update (vector paths with 16 slots at a time, a scalar tail) and the per-slot
// update (delayed_update_slot, the CUDA kernel's) leave the same bytes in every part of the state that
// is saved or read: ring, heads, scales and staging. An unused slot's ring entry at its head is never
// read before it is overwritten, so only this comparison sees a path that writes it.
TEST_CASE("the host's whole-bucket update leaves the per-slot update's ring, heads, scales and staging") {
  for (std::uint32_t L : {16u, 32u, 65u, 1024u}) {
    CAPTURE(L);
    const std::uint32_t n = 150, steps = L == 1024 ? 2 * L + 200 : 300;
    bucket whole(L), each(L);
    for (std::uint32_t j = 0; j < n; ++j) whole.add_slot(), each.add_slot();
    amax_source src(5 + L);
    const tequant::delayed_update_args args{448.0f};
    for (std::uint32_t step = 0; step < steps; ++step) {
      for (std::uint32_t j = 0; j < n; ++j) whole.staging()[j] = each.staging()[j] = src.next();
      whole.update(tequant::window_max{}, args);
      const auto ve = each.view();
      for (std::uint32_t j = 0; j < n; ++j)
        tequant::delayed_update_slot(ve, j, ve.staging[j], tequant::window_max{}, args);
      const auto vw = whole.view();
      const bool same = std::memcmp(vw.ring, ve.ring, std::size_t{n} * L * sizeof(float)) == 0 &&
                        std::memcmp(vw.ring_head, ve.ring_head, n * sizeof(std::uint32_t)) == 0 &&
                        std::memcmp(vw.scale, ve.scale, n * sizeof(float)) == 0 &&
                        std::memcmp(vw.staging, ve.staging, n * sizeof(float)) == 0;
      REQUIRE_MESSAGE(same, "L=", L, " step=", step);
    }
  }
}

namespace {

// Amaxes that put the window maximum where a long-window update splits the ring: runs that decrease
// through a whole round (the maximum is the oldest commit, the position right after the head), runs
// that increase (the newest), random ones, and NaN, inf, negative and unused commits at positions that
// drift across 16-position boundaries (a cache line of the ring) from slot to slot.
float structured_amax(std::uint32_t j, std::uint32_t t, std::uint32_t L, amax_source& rnd) {
  const float inf = std::numeric_limits<float>::infinity();
  if ((t + j) % 16 == 15) return inf;
  if ((t + j) % 16 == 0) return std::numeric_limits<float>::quiet_NaN();
  if ((t + 2 * j) % 23 == 0) return 0.0f;   // unused: the head stays, the slots' heads drift apart
  if ((t + 3 * j) % 29 == 0) return -1.0f;  // committed, never the maximum
  if ((t + j) % 31 == 0) return -0.0f;      // unused too (c == 0)
  const float x = std::exp2(-static_cast<float>((t + 5 * j) % L) / 8.0f);
  switch ((t / L + j) % 3) {
    case 0: return x;          // decreasing through the round
    case 1: return 1.0f / x;   // increasing
    default: return rnd.next();
  }
}

}  // namespace

// Window lengths around multiples of 16 and of the line split, many slots (vector groups and a tail):
// every position of every line is the head, the window maximum sits right after it, at line ends, in
// later lines, or is the amax itself.
TEST_CASE("long windows equal TE's roll at every head position (L not a multiple of 16, NaN/inf at line ends)") {
  for (std::uint32_t L : {65u, 66u, 79u, 80u, 81u, 97u, 130u, 257u}) {
    CAPTURE(L);
    const std::uint32_t n = 37, steps = 3 * L + 50;
    bucket b(L);
    for (std::uint32_t j = 0; j < n; ++j) b.add_slot();
    te_roll::state ref(n, L);
    amax_source rnd(L);
    const tequant::delayed_update_args args{448.0f};
    for (std::uint32_t t = 0; t < steps; ++t) {
      for (std::uint32_t j = 0; j < n; ++j) b.staging()[j] = ref.row(0)[j] = structured_amax(j, t, L, rnd);
      b.update(tequant::window_max{}, args);
      ref.update(te_roll::algo::max, args.scaled_max);
      bool equal = true;
      for (std::uint32_t j = 0; j < n; ++j) equal = equal && same_bits(b.scale(j), ref.scale[j]);
      REQUIRE_MESSAGE(equal, "L=", L, " step=", t);
    }
    std::vector<float> exported(std::size_t{L} * n);
    b.export_te_history(0, n, exported);
    CHECK(std::memcmp(exported.data(), ref.history.data(), exported.size() * sizeof(float)) == 0);
  }
}

namespace {

// Scales, staging and TE's view of the history (the last L-1 commits; an import rotates the ring and
// zeroes the entry TE does not keep, so the ring's bytes may differ where no update reads them).
void require_same_state(bucket& a, bucket& b, std::uint32_t n, std::uint32_t L, const char* what, std::uint32_t t) {
  const auto va = a.view(), vb = b.view();
  std::vector<float> ha(std::size_t{L} * n), hb(std::size_t{L} * n);
  a.export_te_history(0, n, ha);
  b.export_te_history(0, n, hb);
  const bool same = std::memcmp(ha.data(), hb.data(), ha.size() * sizeof(float)) == 0 &&
                    std::memcmp(va.scale, vb.scale, n * sizeof(float)) == 0 &&
                    std::memcmp(va.staging, vb.staging, n * sizeof(float)) == 0;
  REQUIRE_MESSAGE(same, what, ": L=", L, " step=", t);
}

}  // namespace

// Whatever state the host update derives from the ring (the window storage, or anything kept beside
// it) must be rebuilt after each way the ring can reach a bucket without that update: a state file, a
// copy of the bucket (new addresses), growth (reallocation), TE import, and the per-slot update. The
// disturbed bucket must then go on exactly like one that was never disturbed, with heads mid-line.
TEST_CASE("saving, loading, copying, growing or re-importing a bucket mid-window changes no later update") {
  for (std::uint32_t L : {80u, 97u, 1024u}) {
    CAPTURE(L);
    const std::uint32_t n = 40, steps = L == 1024 ? 2 * L + 100 : 4 * L + 30;
    bucket plain(L), moved(L);
    for (std::uint32_t j = 0; j < n; ++j) plain.add_slot(), moved.add_slot();
    amax_source rnd(3 + L);
    const tequant::delayed_update_args args{448.0f};
    const std::uint32_t every = L / 3 + 7;  // disturbances at heads that are not line boundaries
    for (std::uint32_t t = 0; t < steps; ++t) {
      for (std::uint32_t j = 0; j < n; ++j) plain.staging()[j] = moved.staging()[j] = structured_amax(j, t, L, rnd);
      const char* what = "undisturbed";
      if (t % every == every - 1) {
        switch ((t / every) % 5) {
          case 0: {  // through a state file
            tequant::detail::byte_writer w;
            tequant::detail::save_delayed_bucket(moved, w);
            tequant::detail::byte_reader r(w.bytes(), "test");
            moved = tequant::detail::load_delayed_bucket(r, L, tequant::host_backend{});
            what = "loaded";
            break;
          }
          case 1: {  // a copy at other addresses (the original destroyed)
            bucket copy(moved);
            moved = bucket(L);
            moved = copy;
            what = "copied";
            break;
          }
          case 2: {  // reallocated by growth; the new slots stay unused
            const std::uint32_t before = moved.size();
            for (std::uint32_t k = 0; k < before; ++k) moved.add_slot();
            what = "grown";
            break;
          }
          case 3: {  // every slot through TE's layout
            std::vector<float> te(std::size_t{L} * n);
            moved.export_te_history(0, n, te);
            moved.import_te_history(0, n, te);
            what = "re-imported";
            break;
          }
          default: {  // one update of a few slots by the per-slot path (the CUDA kernel's), the rest by the bucket
            const auto v = moved.view(), pv = plain.view();
            for (std::uint32_t j = 0; j < n; j += 7) {
              tequant::delayed_update_slot(v, j, v.staging[j], tequant::window_max{}, args);
              tequant::delayed_update_slot(pv, j, pv.staging[j], tequant::window_max{}, args);
            }
            what = "per-slot";
            break;
          }
        }
      }
      plain.update(tequant::window_max{}, args);
      moved.update(tequant::window_max{}, args);
      require_same_state(plain, moved, n, L, what, t);
    }
  }
}

TEST_CASE("delayed update: hand-checked edge cases") {
  bucket b(3);
  b.add_slot();
  const tequant::delayed_update_args args{448.0f};
  CHECK(b.scale(0) == 1.0f);
  b.update(tequant::window_max{}, args);  // c == 0: untouched
  CHECK(b.scale(0) == 1.0f);
  b.record_amax(0, 2.0f);
  b.record_amax(0, 1.0f);  // max-accumulates, never overwrites
  b.record_amax(0, std::numeric_limits<float>::quiet_NaN());
  CHECK(b.staging_amax(0) == 2.0f);
  b.update(tequant::window_max{}, args);
  CHECK(b.scale(0) == 224.0f);
  CHECK(b.staging_amax(0) == 0.0f);
  b.staging()[0] = std::numeric_limits<float>::infinity();
  b.update(tequant::window_max{}, args);
  CHECK(b.scale(0) == 224.0f);  // inf in the window freezes the scale
  b.staging()[0] = 1.0f;
  b.update(tequant::window_max{}, args);
  CHECK(b.scale(0) == 224.0f);  // window {2, inf, 1}
  b.staging()[0] = 1.0f;
  b.update(tequant::window_max{}, args);
  CHECK(b.scale(0) == 224.0f);  // window {inf, 1, 1}
  b.staging()[0] = 4.0f;
  b.update(tequant::window_max{}, args);
  CHECK(b.scale(0) == 112.0f);  // window {1, 1, 4}
  b.staging()[0] = 1e-44f;
  b.update(tequant::most_recent{}, args);
  CHECK(b.scale(0) == std::numeric_limits<float>::max());  // overflow becomes FLT_MAX
}

TEST_CASE("a user window functor is fused into the pass") {
  struct half_window {
    float operator()(float, float w) const noexcept { return w * 2.0f; }
  };
  bucket b(4);
  b.add_slot();
  b.staging()[0] = 7.0f;
  b.update(half_window{}, {448.0f});
  CHECK(b.scale(0) == 32.0f);
}

TEST_CASE("growing a bucket keeps existing state; import/export round-trips TE's layout") {
  const std::uint32_t L = 5;
  bucket b(L);
  te_roll::state ref(3, L);
  b.add_slot();
  b.add_slot();
  amax_source src(42);
  // Advance two slots, then add many more (forces reallocations) and compare the old ones.
  for (int s = 0; s < 11; ++s) {
    for (std::uint32_t j = 0; j < 2; ++j) b.staging()[j] = ref.row(0)[j] = src.next();
    b.update(tequant::window_max{}, {448.0f});
    ref.update(te_roll::algo::max, 448.0f);
  }
  for (int k = 0; k < 40; ++k) b.add_slot();
  CHECK(b.size() == 42);
  std::vector<float> h(std::size_t{L} * 2), want(std::size_t{L} * 2);
  b.export_te_history(0, 2, h);
  for (std::uint32_t i = 0; i < L; ++i)
    for (std::uint32_t j = 0; j < 2; ++j) want[i * 2 + j] = ref.row(i)[j];
  CHECK(std::memcmp(h.data(), want.data(), h.size() * sizeof(float)) == 0);
  CHECK(b.scale(41) == 1.0f);

  // Import a TE history into slots 10..12, continue both implementations, compare.
  for (std::uint32_t i = 0; i < L; ++i)
    for (std::uint32_t j = 0; j < 3; ++j) ref.row(i)[j] = (i == 0) ? 0.0f : static_cast<float>(10 * i + j);
  b.import_te_history(10, 3, ref.history);
  ref.scale.assign(3, 1.0f);  // import moves histories only; slots 10..12 still have scale 1
  for (int s = 0; s < 20; ++s) {
    for (std::uint32_t j = 0; j < 3; ++j) b.staging()[10 + j] = ref.row(0)[j] = src.next();
    b.update(tequant::window_max{}, {448.0f});
    ref.update(te_roll::algo::max, 448.0f);
    for (std::uint32_t j = 0; j < 3; ++j) {
      REQUIRE(same_bits(b.scale(10 + j), ref.scale[j]));
    }
  }
  std::vector<float> h3(std::size_t{L} * 3);
  b.export_te_history(10, 3, h3);
  CHECK(std::memcmp(h3.data(), ref.history.data(), h3.size() * sizeof(float)) == 0);
}

// A state file holds each ring in position order, for short rings (scanned) and long ones (suffix
// maxima), whatever the update kept beside them. Every slot is used at every step, so position p
// holds the last commit t with t % L == p: the file's ring section is checked against that, not
// against the library's own reading of its memory.
TEST_CASE("a state file holds each ring in position order, after updates of either algorithm") {
  for (std::uint32_t L : {5u, 64u, 65u, 97u, 1024u}) {
    CAPTURE(L);
    const std::uint32_t n = 19, steps = L + L / 2 + 3;
    const auto amax = [](std::uint32_t j, std::uint32_t t) { return static_cast<float>(1 + j * 4099 + t); };
    bucket b(L);
    for (std::uint32_t j = 0; j < n; ++j) b.add_slot();
    for (std::uint32_t t = 0; t < steps; ++t) {
      for (std::uint32_t j = 0; j < n; ++j) b.staging()[j] = amax(j, t);
      if (t % 3 == 0) b.update(tequant::most_recent{}, {448.0f});
      else b.update(tequant::window_max{}, {448.0f});
    }
    tequant::detail::byte_writer w;
    tequant::detail::save_delayed_bucket(b, w);
    const std::vector<std::uint8_t> bytes = w.bytes();
    const std::size_t ring_at = 4 * (2 + 3 * std::size_t{n});  // L, n, staging, scales, heads
    REQUIRE(bytes.size() == ring_at + 4 * std::size_t{n} * L);
    bool in_order = true;
    for (std::uint32_t j = 0; j < n; ++j)
      for (std::uint32_t p = 0; p < L; ++p) {
        const std::uint32_t last = p + (steps - 1 - p) / L * L;  // the last step t <= steps-1 with t % L == p
        float got;
        std::memcpy(&got, bytes.data() + ring_at + 4 * (std::size_t{j} * L + p), 4);
        in_order = in_order && same_bits(got, amax(j, last));
      }
    CHECK(in_order);
    tequant::detail::byte_reader r(bytes, "test");
    bucket loaded = tequant::detail::load_delayed_bucket(r, L, tequant::host_backend{});
    for (std::uint32_t j = 0; j < n; ++j)
      for (std::uint32_t p = 0; p < L; ++p)
        REQUIRE(same_bits(loaded.view().ring[std::size_t{j} * L + p], b.view().ring[std::size_t{j} * L + p]));
  }
}

TEST_CASE("delayed_bucket misuse raises tequant::error naming the rule") {
  CHECK_THROWS_WITH_AS(bucket(0), doctest::Contains("tequant: delayed_bucket: history_length 0"), tequant::error);
  bucket b(4);
  b.add_slot();
  CHECK_THROWS_WITH_AS(b.scale(1), doctest::Contains("tequant: delayed_bucket::scale: slot 1 out of range"),
                       tequant::error);
  std::vector<float> wrong(3);
  CHECK_THROWS_WITH_AS(b.export_te_history(0, 1, wrong), doctest::Contains("L*n = 4"), tequant::error);
  CHECK_THROWS_WITH_AS(b.import_te_history(0, 2, wrong), doctest::Contains("out of range"), tequant::error);
  CHECK(b.scale(0) == 1.0f);  // state unchanged after the failures
}
