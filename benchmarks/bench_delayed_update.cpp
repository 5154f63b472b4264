// SPDX-License-Identifier: Apache-2.0
// tequant's O(slots) delayed update (ring + monotonic deque) beside the roll-based re-implementation
// of TE's fused update (O(slots * L)). Each iteration refills the staging amaxes (as casts + the
// all-reduce would) and runs one update; both sides do the same refill.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
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

void bm_tequant(benchmark::State& st) {
  const auto n = static_cast<std::uint32_t>(st.range(0)), L = static_cast<std::uint32_t>(st.range(1));
  tequant::delayed_bucket<tequant::host_backend> b(L);
  for (std::uint32_t j = 0; j < n; ++j) b.add_slot();
  const auto src = amax_stream(n);
  const tequant::delayed_update_args args{448.0f};
  // Warm up past one full window so deques and rings are in their steady state.
  for (std::uint32_t s = 0; s < L + 8; ++s) {
    std::memcpy(b.staging().data(), src.data() + (s % rounds) * n, n * sizeof(float));
    b.update(tequant::window_max{}, args);
  }
  std::size_t r = 0;
  for (auto _ : st) {
    std::memcpy(b.staging().data(), src.data() + r * n, n * sizeof(float));
    b.update(tequant::window_max{}, args);
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

BENCHMARK(bm_tequant)->Name("delayed_update/tequant")->ArgNames({"slots", "L"})
    ->Args({1000, 16})->Args({1000, 1024})->Args({10000, 16})->Args({10000, 1024})->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_te_roll)->Name("delayed_update/te_roll")->ArgNames({"slots", "L"})
    ->Args({1000, 16})->Args({1000, 1024})->Args({10000, 16})->Args({10000, 1024})->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
