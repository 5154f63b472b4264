// SPDX-License-Identifier: Apache-2.0
// Cast handles: plan_cast(handle) gives exactly plan_cast(slot_id)'s plan (every shipped recipe, a
// recipe whose plans read its state, autocast on and off, recording frames, replays, nested and
// inactive frames, registrations and state loads in between), and refuses handles it did not bind.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/manager.hpp"
#include "tequant/persistence.hpp"
#include "tequant/recipe/block.hpp"
#include "tequant/recipe/current.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/mxfp8.hpp"
#include "tequant/recipe/nvfp4.hpp"
#include "plan_compare.hpp"

namespace {

using tequant::backward_cast_handle;
using tequant::cast_plan;
using tequant::forward_cast_handle;

/// Delayed scaling whose plan reads a state value (the dtype follows the slot's scale): a cast
/// handle must not keep its plan (it declares no stable_plans).
struct reads_state_recipe : tequant::delayed_scaling<> {
  static constexpr std::string_view name = "test::reads_state";
  static constexpr bool stable_plans = false;
  template <class Backend>
  static cast_plan plan(const tequant::delayed_params& p, tequant::delayed_bucket<Backend>& s,
                        tequant::slot_id slot) noexcept {
    cast_plan c = tequant::delayed_scaling<>::plan(p, s, slot);
    c.dtype = s.scale_data()[slot.index] > 1.0f ? tequant::fp8_dtype::e5m2 : tequant::fp8_dtype::e4m3;
    return c;
  }
};

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

/// A plan by what it means (pointers by what they point at): comparable across managers.
struct seen {
  bool enabled, tile_2d, power_2_scale, columnwise_rht, has_scale, has_amax, has_rng;
  tequant::fp8_dtype dtype;
  tequant::scaling_mode mode;
  std::uint32_t epsilon, scale;
  std::uint64_t rng, seed;
  friend bool operator==(const seen&, const seen&) = default;
};

seen meaning(const cast_plan& p) {
  return {p.enabled,
          p.tile_2d,
          p.power_2_scale,
          p.columnwise_rht,
          p.scale != nullptr,
          p.amax != nullptr,
          p.rng_offset != nullptr,
          p.dtype,
          p.mode,
          bits(p.amax_epsilon),
          p.scale != nullptr ? bits(*p.scale) : 0u,
          p.rng_offset != nullptr ? *p.rng_offset : 0u,
          p.rng_seed};
}

enum class path { slot_ids, handles, both };

/// stacked_recompute's frames without the optional plan_forward_kept: a cast handle inside frames
/// falls back to plan_forward.
template <class Backend>
struct stack_without_kept : tequant::frame_stack<Backend> {
  template <class... A>
  const cast_plan& plan_forward_kept(A&&...) = delete;
};
struct recompute_without_kept {
  using policy_kind = tequant::checkpoint_kind;
  template <class Backend>
  using stack_for = stack_without_kept<Backend>;
};

/// One manager driven through a fixed script; every cast's plan goes to `log`, then the cast's
/// effect on the state (an amax recorded, random bits drawn).
template <class R, class Checkpoint = tequant::stacked_recompute>
struct script {
  using manager = tequant::quantization_manager<R, tequant::explicit_scope, Checkpoint>;
  manager m;
  path how;
  std::vector<std::vector<forward_cast_handle>> fh;
  std::vector<std::vector<backward_cast_handle>> bh;
  std::vector<seen> log;
  float synthetic = 0.75f;

  script(path p, typename manager::params_type params) : m(params), how(p) {}

  /// A module binds its slots at registration.
  void add(std::uint32_t gemms) {
    const auto h = m.register_module("m" + std::to_string(fh.size()), gemms);
    fh.emplace_back();
    bh.emplace_back();
    for (std::uint32_t g = 0; g < gemms; ++g) {
      for (std::uint8_t r = 0; r < 3; ++r) fh.back().push_back(m.bind(h, static_cast<tequant::forward_role>(r), g));
      for (std::uint8_t r = 0; r < 2; ++r) bh.back().push_back(m.bind(h, static_cast<tequant::backward_role>(r), g));
    }
  }

  template <class Handle>
  void cast(Handle& h) {
    cast_plan p;
    if (how == path::slot_ids) {
      p = m.plan_cast(h.slot());
    } else {
      p = m.plan_cast(h);
      if (how == path::both) tequant_test::check_same_plan(p, m.plan_cast(h.slot()));
    }
    log.push_back(meaning(p));
    if (p.amax != nullptr) *p.amax = std::max(*p.amax, synthetic);
    if (p.rng_offset != nullptr) *p.rng_offset += 64;
    synthetic = synthetic < 40.0f ? synthetic * 1.7f : 0.5f;
  }
  void fwd(std::size_t i) {
    for (auto& h : fh.at(i)) cast(h);
  }
  void bwd(std::size_t i) {
    for (auto& h : bh.at(i)) cast(h);
  }

  void step(int k) {
    if (k == 1) add(2);  // a registration between steps: every handle bound before re-binds
    const bool fifth = fh.size() > 4;
    tequant::checkpoint_frame fa("a"), fb("b"), fc("c"), fd("d"), fe("e");
    {
      auto ac = m.autocast(k != 2);
      fwd(0);  // (the first forward cast after an event goes out of line; the next ones may not)
      fwd(0);
      {
        auto off = m.autocast(false);  // right after common-path casts: must not stay on it
        fwd(0);
        {
          auto on = m.autocast(true);
          fwd(3);
          fwd(3);
        }
        fwd(3);  // back in the disabled region
      }
      fwd(0);
      {
        auto ge = m.checkpoint_forward(fe);  // right after common-path casts: must record
        fwd(0);
      }
      fwd(0);
      {
        auto ga = m.checkpoint_forward(fa);
        fwd(1);
        {
          auto gb = m.checkpoint_forward(fb);  // nested recording frames
          fwd(2);
          {
            auto off = m.autocast(false);
            fwd(2);
          }
          fwd(2);
        }
        fwd(1);
      }
      {
        auto inner = m.autocast(k == 2);  // the opposite state, nested
        fwd(3);
      }
      {
        auto gd = m.checkpoint_forward(fd, false);  // an inactive frame
        fwd(3);
      }
      if (fifth) fwd(4);
    }
    fwd(0);  // outside any region
    {
      auto scope = m.backward_scope();
      if (fifth) bwd(4);
      {
        auto r = m.checkpoint_replay(fe);
        fwd(0);
      }
      bwd(3);
      {
        auto r = m.checkpoint_replay(fb);
        fwd(2);
        auto again = m.autocast(k != 2);  // what the call site ran under (TE's ctx.fp8)
        fwd(2);
      }
      bwd(2);
      {
        auto r = m.checkpoint_replay(fa);
        fwd(1);
        {
          auto gc = m.checkpoint_forward(fc);  // records inside a replay: from the replay's snapshot
          fwd(2);
          fwd(1);
        }
        auto off = m.autocast(false);
        fwd(1);
      }
      {
        auto r = m.checkpoint_replay(fc);
        fwd(1);
        fwd(2);
      }
      bwd(1);
      bwd(0);
    }
  }

  void run(int steps) {
    add(1);
    add(2);
    add(1);
    add(1);
    for (int k = 0; k < steps; ++k) step(k);
  }
};

template <class R>
typename R::params_type params_for() {
  typename R::params_type p{};
  if constexpr (std::is_same_v<typename R::params_type, tequant::delayed_params>) p.history_length = 4;
  return p;
}

}  // namespace

TEST_CASE_TEMPLATE("plan_cast(handle) gives plan_cast(slot_id)'s plans: every recipe, autocast, frames, replays", R,
                   tequant::delayed_scaling<>, tequant::delayed_scaling<tequant::most_recent>, tequant::current_scaling,
                   tequant::mxfp8_scaling, tequant::block_scaling, tequant::nvfp4_scaling, reads_state_recipe) {
  constexpr int steps = 5;
  script<R> slots(path::slot_ids, params_for<R>()), handles(path::handles, params_for<R>()),
      both(path::both, params_for<R>());
  slots.run(steps);
  handles.run(steps);
  both.run(steps);
  REQUIRE(slots.log.size() > 300);
  CHECK(handles.log == slots.log);
  CHECK(both.log == slots.log);
  // The script reaches every kind of plan: disabled, replayed (no amax, a snapshot), live.
  const auto count = [&](auto pred) { return std::count_if(slots.log.begin(), slots.log.end(), pred); };
  CHECK(count([](const seen& s) { return !s.enabled; }) > 0);
  CHECK(count([](const seen& s) { return s.enabled; }) > 0);
  if constexpr (std::is_same_v<R, tequant::delayed_scaling<>> || std::is_same_v<R, reads_state_recipe>) {
    CHECK(count([](const seen& s) { return s.enabled && s.has_scale && !s.has_amax; }) > 0);  // replays
    for (std::size_t b = 0; b < slots.m.bucket_count(); ++b)
      for (std::uint32_t j = 0; j < slots.m.bucket(static_cast<std::uint32_t>(b)).slots; ++j) {
        const tequant::slot_id s{slots.m.bucket(static_cast<std::uint32_t>(b)).dir, static_cast<std::uint32_t>(b), j};
        CHECK(bits(handles.m.scale(s)) == bits(slots.m.scale(s)));
        CHECK(bits(handles.m.staging_amax(s)) == bits(slots.m.staging_amax(s)));
      }
  }
  if constexpr (std::is_same_v<R, reads_state_recipe>) {  // the dtype did follow the state
    CHECK(count([](const seen& s) { return s.dtype == tequant::fp8_dtype::e5m2; }) > 0);
    CHECK(count([](const seen& s) { return s.dtype == tequant::fp8_dtype::e4m3; }) > 0);
  }
  if constexpr (std::is_same_v<R, tequant::nvfp4_scaling>)
    CHECK(count([](const seen& s) { return s.has_rng && s.rng != 0; }) > 0);
  CHECK(handles.m.stats().forward_updates == slots.m.stats().forward_updates);
  CHECK(handles.m.stats().backward_updates == slots.m.stats().backward_updates);
}

TEST_CASE("a frame stack without plan_forward_kept gives cast handles the same plans through plan_forward") {
  using R = tequant::delayed_scaling<>;
  script<R> slots(path::slot_ids, params_for<R>());
  script<R, recompute_without_kept> handles(path::handles, params_for<R>()), both(path::both, params_for<R>());
  slots.run(5);
  handles.run(5);
  both.run(5);
  REQUIRE(slots.log.size() > 300);
  CHECK(handles.log == slots.log);
  CHECK(both.log == slots.log);
  CHECK(std::count_if(slots.log.begin(), slots.log.end(),
                      [](const seen& s) { return s.enabled && s.has_scale && !s.has_amax; }) > 0);  // replays
}

TEST_CASE("a cast handle re-binds after a state load: the loaded state, not the old one") {
  script<tequant::delayed_scaling<>> s(path::both, params_for<tequant::delayed_scaling<>>());
  s.run(2);
  const auto saved = tequant::state_bytes(s.m);
  std::vector<float> saved_scales;
  for (auto& h : s.fh[1]) saved_scales.push_back(s.m.scale(h.slot()));
  const float* const old_memory = s.m.plan_cast(s.fh[1][0]).scale;
  s.step(3);
  // A slot whose scale the step changed.
  std::size_t k = 0;
  while (k < saved_scales.size() && bits(s.m.scale(s.fh[1][k].slot())) == bits(saved_scales[k])) ++k;
  REQUIRE(k < saved_scales.size());
  const tequant::slot_id slot = s.fh[1][k].slot();
  const float saved_scale = saved_scales[k];
  tequant::load_state(s.m, saved);
  auto ac = s.m.autocast();
  const cast_plan& after = s.m.plan_cast(s.fh[1][k]);
  tequant_test::check_same_plan(after, s.m.plan_cast(slot));
  CHECK(after.scale - k != old_memory);  // the loaded bucket's memory
  CHECK(bits(*after.scale) == bits(saved_scale));
}

TEST_CASE("plan_cast refuses handles this manager did not bind; bind refuses slots that are not its own") {
  using manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::explicit_scope>;
  manager a, b;
  const auto ha = a.register_module("a");
  const auto hb = b.register_module("b");
  auto mine = a.bind(ha, tequant::forward_role::weight);
  auto theirs = b.bind(hb, tequant::forward_role::weight);  // the same slot id, another manager
  auto theirs_back = b.bind(hb, tequant::backward_role::grad_output);
  CHECK(mine.slot() == theirs.slot());
  CHECK(mine.bound());
  auto ac = a.autocast();
  CHECK(a.plan_cast(mine).scale == a.plan_cast(mine.slot()).scale);
  CHECK_THROWS_WITH_AS(a.plan_cast(theirs), doctest::Contains("another manager bound"), tequant::error);
  CHECK_THROWS_WITH_AS(a.plan_cast(theirs_back), doctest::Contains("another manager bound"), tequant::error);
  forward_cast_handle none;
  CHECK_FALSE(none.bound());
  CHECK_THROWS_WITH_AS(a.plan_cast(none), doctest::Contains("no manager bound"), tequant::error);
  try {
    (void)a.plan_cast(theirs);
    FAIL("no error");
  } catch (const tequant::error& e) {
    CHECK(std::string(e.what()).rfind("tequant: plan_cast: a forward cast handle", 0) == 0);
  }
  const tequant::slot_id back = a.slot(ha, tequant::backward_role::grad_input);
  CHECK_THROWS_WITH_AS((void)a.bind<tequant::direction::forward>(back), doctest::Contains("is a backward slot"),
                       tequant::error);
  CHECK_THROWS_WITH_AS((void)a.bind<tequant::direction::forward>(tequant::slot_id{tequant::direction::forward, 0, 3}),
                       doctest::Contains("does not belong to this manager"), tequant::error);
  CHECK_THROWS_AS((void)a.bind(tequant::module_handle{7}, tequant::forward_role::input), tequant::error);
  // A refused cast changed nothing: the own handle still takes its common path with the same plan.
  CHECK(a.plan_cast(mine).amax == a.plan_cast(mine.slot()).amax);
}
