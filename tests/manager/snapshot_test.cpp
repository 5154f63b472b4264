// SPDX-License-Identifier: Apache-2.0
// Checkpoint snapshots in flat storage: first-use scales for frames of any size, any replay order,
// frames reused step after step, and the map's own invariants (linear and indexed lookups, undo).
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/checkpoint/snapshot_map.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

using manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::explicit_scope>;

tequant::delayed_params params() {
  tequant::delayed_params p;
  p.history_length = 4;
  return p;
}

}  // namespace

TEST_CASE("snapshot_map: lookups below and above the index threshold, duplicates, undo, clear") {
  using tequant::detail::snapshot_map;
  snapshot_map m;
  constexpr std::uint64_t n = 3 * snapshot_map::index_threshold;
  for (std::uint64_t k = 0; k < n; ++k) {
    const std::uint64_t key = (k % 3) << 32 | (k * 7919);
    CHECK(m.try_emplace(key, static_cast<float>(k)));
    CHECK_FALSE(m.try_emplace(key, -1.0f));  // first use wins
    CHECK(m.size() == k + 1);
    // Every key added so far is found at its position, in reverse order (defeats the hint).
    for (std::uint64_t j = k + 1; j-- > 0;) {
      const std::size_t pos = m.find((j % 3) << 32 | (j * 7919));
      REQUIRE(pos == j);
      CHECK(m.value(pos) == static_cast<float>(j));
    }
    CHECK(m.find(std::uint64_t{5} << 32) == snapshot_map::npos);
  }
  const std::uint64_t last = ((n - 1) % 3) << 32 | ((n - 1) * 7919);
  m.pop_back();
  CHECK(m.size() == n - 1);
  CHECK(m.find(last) == snapshot_map::npos);
  CHECK(m.find(0) == 0);
  CHECK(m.try_emplace(last, 42.0f));
  CHECK(m.value(m.find(last)) == 42.0f);
  m.clear();
  CHECK(m.empty());
  CHECK(m.find(0) == snapshot_map::npos);
  CHECK(m.find(last) == snapshot_map::npos);
  CHECK(m.try_emplace(last, 1.0f));
  CHECK(m.find(last) == 0);
}

TEST_CASE("snapshot_map: reused after clear() with its index built, below the threshold and past it again") {
  using tequant::detail::snapshot_map;
  const auto key = [](std::uint64_t k) { return (k % 3) << 32 | (k * 7919); };
  constexpr std::uint64_t big = 2 * snapshot_map::index_threshold;
  snapshot_map m;
  for (std::uint64_t k = 0; k < big; ++k) REQUIRE(m.try_emplace(key(k), static_cast<float>(k)));
  // clear() keeps the index; entries added below the threshold (the inline path) must stay findable
  // through it once the map grows past the threshold again.
  for (const std::uint64_t n : {std::uint64_t{3}, big}) {
    m.clear();
    for (std::uint64_t k = 0; k < n; ++k) {
      CHECK(m.try_emplace(key(k), static_cast<float>(k) + 0.5f));
      CHECK_FALSE(m.try_emplace(key(k), -1.0f));
    }
    CHECK(m.size() == n);
    for (std::uint64_t j = n; j-- > 0;) {  // reverse order: every lookup misses the hint
      const std::size_t pos = m.find(key(j));
      REQUIRE(pos == j);
      CHECK(m.value(pos) == static_cast<float>(j) + 0.5f);
    }
    CHECK(m.find(key(n)) == snapshot_map::npos);
  }
}

TEST_CASE("a frame around many modules replays every slot with its first-use scale, in any order, step after step") {
  manager m(params());
  constexpr std::uint32_t modules = 20;  // 60 forward slots: the snapshot uses its index
  std::vector<tequant::slot_id> fwd;
  for (std::uint32_t i = 0; i < modules; ++i) {
    const auto h = m.register_module("m" + std::to_string(i));
    for (auto r : {tequant::forward_role::input, tequant::forward_role::weight, tequant::forward_role::output})
      fwd.push_back(m.slot(h, r));
  }
  tequant::checkpoint_frame frame("whole-model");
  for (int step = 0; step < 3; ++step) {
    std::vector<float> expected(fwd.size());
    {
      auto g = m.checkpoint_forward(frame);
      // First region: the even slots record their amax; its exit updates their scales.
      {
        auto ac = m.autocast();
        for (std::size_t k = 0; k < fwd.size(); k += 2) {
          expected[k] = m.scale(fwd[k]);
          const auto p = m.plan_cast(fwd[k]);
          CHECK(*p.scale == expected[k]);
          *p.amax = 0.5f * static_cast<float>(k + 1 + step);
        }
      }
      // Second region: every slot; the even ones changed scale, the snapshot keeps their first use.
      {
        auto ac = m.autocast();
        for (std::size_t k = 0; k < fwd.size(); ++k) {
          if (k % 2 == 0) CHECK(m.scale(fwd[k]) != expected[k]);
          else expected[k] = m.scale(fwd[k]);
          (void)m.plan_cast(fwd[k]);
        }
      }
    }
    CHECK(frame.snapshot_slots() == fwd.size());
    {
      auto r = m.checkpoint_replay(frame);
      auto ac = m.autocast();
      for (std::size_t k = fwd.size(); k-- > 0;) {  // reverse order
        const auto p = m.plan_cast(fwd[k]);
        CHECK(p.amax == nullptr);
        CHECK(*p.scale == expected[k]);
      }
      const auto again = m.plan_cast(fwd[7]);  // twice in one replay: the same snapshot entry
      CHECK(*again.scale == expected[7]);
    }
    CHECK_FALSE(frame.has_snapshot());
    CHECK(frame.snapshot_slots() == 0);
    { auto s = m.backward_scope(); }
  }
  CHECK(m.stats().outstanding_snapshots == 0);
}
