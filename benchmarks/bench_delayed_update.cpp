// SPDX-License-Identifier: Apache-2.0
// tequant's O(slots) delayed update (ring scan or monotonic deque) beside the roll-based
// re-implementation of TE's fused update (O(slots * L)) and beside a floor: a hand-written loop doing
// only the per-slot work no update can avoid. Each iteration refills the staging amaxes (as casts +
// the all-reduce would) and runs one update; every row does the same refill. Real time throughout.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "recipe/te_roll_reference.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

constexpr std::size_t rounds = 64;  // distinct staging vectors cycled through

std::vector<float> amax_stream(std::size_t n) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> e(-8.0f, 8.0f);
  std::vector<float> v(n * rounds);
  for (auto& x : v) x = (rng() % 10 == 0) ? 0.0f : std::exp2(e(rng));  // ~10% unused slots
  return v;
}

// The unavoidable per-slot work: read and clear the staged amax, commit it to the history ring,
// compute scale and scale_inv from a given max (here the staged amax itself; no window is read). With
// the update's semantics, so that the floor does no less than an update must: an unused slot
// (amax 0) keeps its ring entry, head and scale; a NaN, infinite or zero amax keeps the scale; an
// overflowing scale becomes FLT_MAX. Written plainly: with -march=native it vectorises (a masked
// scatter for the commit); without, GCC's branches on the amax ran faster here than bit-mask selects.
// With_inverse = false drops scale_inv, which tequant's state does not keep (its casts compute 1 / scale).
// SecondLine: the same loop that also reads, per slot, the position one past the head of a second
// [n * L] array (zeros, so the results are unchanged) and takes its maximum with the amax: the least
// any window update costs that keeps a second per-slot array beside the ring (as the suffix maxima of
// long windows do): one more line, on a page of its own at L >= 1024.
template <bool WithInverse, bool SecondLine = false>
void bm_floor(benchmark::State& st) {
  const auto n = static_cast<std::uint32_t>(st.range(0)), L = static_cast<std::uint32_t>(st.range(1));
  std::vector<float> staging(n), scale(n, 1.0f), scale_inv(n, 1.0f), ring(std::size_t{n} * L);
  std::vector<float> second(SecondLine ? std::size_t{n} * L : 0);
  std::vector<std::uint32_t> head(n);
  const auto src = amax_stream(n);
  const float scaled_max = 448.0f, inf = std::numeric_limits<float>::infinity(), fmax = std::numeric_limits<float>::max();
  std::size_t r = 0;
  for (auto _ : st) {
    std::memcpy(staging.data(), src.data() + r * n, n * sizeof(float));
    for (std::uint32_t j = 0; j < n; ++j) {
      const float c = staging[j];
      staging[j] = 0.0f;
      const std::uint32_t h = head[j], next = h + 1 == L ? 0 : h + 1;
      float& entry = ring[std::size_t{j} * L + h];
      float a = c;
      if constexpr (SecondLine) {
        const float o = second[std::size_t{j} * L + next];
        a = c > o ? c : o;
      }
      float q = scaled_max / a;
      q = q < fmax ? q : fmax;
      const bool used = c != 0.0f;
      entry = used ? c : entry;
      head[j] = used ? next : h;
      const float s = a > 0.0f && a < inf ? q : scale[j];
      scale[j] = s;
      if constexpr (WithInverse) scale_inv[j] = 1.0f / s;
    }
    benchmark::DoNotOptimize(scale.data());
    benchmark::DoNotOptimize(scale_inv.data());
    benchmark::DoNotOptimize(ring.data());
    benchmark::ClobberMemory();
    r = r + 1 == rounds ? 0 : r + 1;
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
}

template <class Algo>
void bm_tequant(benchmark::State& st) {
  const auto n = static_cast<std::uint32_t>(st.range(0)), L = static_cast<std::uint32_t>(st.range(1));
  tequant::delayed_bucket<tequant::host_backend> b(L);
  for (std::uint32_t j = 0; j < n; ++j) b.add_slot();
  const auto src = amax_stream(n);
  const tequant::delayed_update_args args{448.0f};
  // Warm up past one full window so deques and rings are in their steady state.
  for (std::uint32_t s = 0; s < L + 8; ++s) {
    std::memcpy(b.staging().data(), src.data() + (s % rounds) * n, n * sizeof(float));
    b.update(Algo{}, args);
  }
  std::size_t r = 0;
  for (auto _ : st) {
    std::memcpy(b.staging().data(), src.data() + r * n, n * sizeof(float));
    b.update(Algo{}, args);
    benchmark::DoNotOptimize(b.scale_data());
    r = r + 1 == rounds ? 0 : r + 1;
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
}

void bm_te_roll(benchmark::State& st) {
  const auto n = static_cast<std::uint32_t>(st.range(0)), L = static_cast<std::uint32_t>(st.range(1));
  te_roll::state ref(n, L);
  const auto src = amax_stream(n);
  std::size_t r = 0;
  for (auto _ : st) {
    std::memcpy(ref.row(0), src.data() + r * n, n * sizeof(float));
    ref.update(te_roll::algo::max, 448.0f);
    benchmark::DoNotOptimize(ref.scale.data());
    r = r + 1 == rounds ? 0 : r + 1;
  }
  st.SetItemsProcessed(static_cast<std::int64_t>(st.iterations() * n));
}

}  // namespace

namespace {
void delayed_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"slots", "L"})->Args({1000, 16})->Args({1000, 1024})->Args({10000, 16})->Args({10000, 1024});
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
}  // namespace

BENCHMARK(bm_floor<true>)->Name("delayed_update/floor")->Apply(delayed_args);
BENCHMARK(bm_floor<false>)->Name("delayed_update/floor_no_inverse")->Apply(delayed_args);
BENCHMARK(bm_floor<true, true>)->Name("delayed_update/floor_two_lines")->Apply(delayed_args);
BENCHMARK(bm_tequant<tequant::window_max>)->Name("delayed_update/tequant")->Apply(delayed_args);
BENCHMARK(bm_tequant<tequant::most_recent>)->Name("delayed_update/most_recent")->Apply(delayed_args);
BENCHMARK(bm_te_roll)->Name("delayed_update/te_roll")->Apply(delayed_args);

BENCHMARK_MAIN();
