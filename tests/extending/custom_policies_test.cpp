// SPDX-License-Identifier: Apache-2.0
// A recipe and a boundary policy of a user's (examples/custom_policies) work in the unmodified manager:
// numerics, checkpoint replays, save/load, the distributed reduction's contract, and the flush rule.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "custom_policies/ema_current_scaling.hpp"
#include "custom_policies/every_k_backwards.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/manager.hpp"
#include "tequant/persistence/state.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

using custom::ema_current_scaling;
using custom::every_k_backwards;
using tequant::direction;

template <class Boundary>
using ema_manager = tequant::quantization_manager<ema_current_scaling, Boundary, tequant::stacked_recompute>;

custom::ema_params params(float decay = 0.5f) {
  custom::ema_params p;
  p.decay = decay;
  return p;
}

std::uint32_t bits(float f) { return tequant::detail::float_bits(f); }

// One forward cast of `s` that sees amax `v` (what a module's quantize() would record).
template <class M>
void cast(M& m, tequant::slot_id s, float v) {
  const tequant::cast_plan p = m.plan_cast(s);
  REQUIRE(p.enabled);
  REQUIRE(p.amax != nullptr);
  m.backend().max_accumulate(p.amax, v);
}

}  // namespace

static_assert(tequant::stateful_recipe_for<ema_current_scaling, tequant::host_backend>);
static_assert(tequant::boundary_strategy<every_k_backwards>);

TEST_CASE("ema_current_scaling: the manager updates scales from the moving average, step by step") {
  ema_manager<tequant::autocast_entry> m(params(0.5f));
  const auto h = m.register_module("lin", 1);
  const auto x = m.slot(h, tequant::forward_role::input, 0);
  const auto w = m.slot(h, tequant::forward_role::weight, 0);
  const float e4m3_max = 448.0f;
  float ema_x = 0.0f, ema_w = 0.0f;
  const float amax_x[] = {4.0f, 8.0f, 2.0f}, amax_w[] = {1.0f, 0.0f, 0.25f};
  for (int step = 0; step < 3; ++step) {
    {
      auto region = m.autocast();
      cast(m, x, amax_x[step]);
      cast(m, w, amax_w[step]);
    }  // forward update
    ema_x = ema_current_scaling::next_ema(ema_x, amax_x[step], 0.5f);
    ema_w = ema_current_scaling::next_ema(ema_w, amax_w[step], 0.5f);
    CHECK(bits(m.scale(x)) == bits(e4m3_max / ema_x));
    CHECK(bits(m.scale(w)) == bits(e4m3_max / ema_w));
    CHECK(m.staging_amax(x) == 0.0f);
  }
  CHECK(ema_x == 4.0f);  // 4, then (4 + 8) / 2 = 6, then (6 + 2) / 2 = 4
  CHECK(ema_w == 0.625f);  // 1, kept at 0 amax, then (1 + 0.25) / 2
  CHECK(m.stats().forward_updates == 3);
}

TEST_CASE("ema_current_scaling: a checkpoint replay casts with the original forward's scale") {
  ema_manager<tequant::autocast_entry> m(params());
  const auto h = m.register_module("lin", 1);
  const auto x = m.slot(h, tequant::forward_role::input, 0);
  tequant::checkpoint_frame f("block");
  float used = 0.0f;
  {
    auto region = m.autocast();
    auto frame = m.checkpoint_forward(f);
    used = *m.plan_cast(x).scale;
    cast(m, x, 16.0f);
  }
  REQUIRE(m.scale(x) != used);  // the forward update moved the live scale
  {
    auto replay = m.checkpoint_replay(f);
    const tequant::cast_plan p = m.plan_cast(x);
    CHECK(p.amax == nullptr);
    CHECK(bits(*p.scale) == bits(used));
  }
  CHECK(m.stats().outstanding_snapshots == 0);
}

TEST_CASE("ema_current_scaling: save/load round-trips every bit and refuses other params") {
  ema_manager<tequant::autocast_entry> m(params(0.75f));
  const auto h = m.register_module("lin", 2);
  for (int step = 0; step < 3; ++step) {
    auto region = m.autocast();
    for (std::uint32_t g = 0; g < 2; ++g) cast(m, m.slot(h, tequant::forward_role::input, g), 3.0f + step + g);
  }
  cast(m, m.slot(h, tequant::backward_role::grad_output, 1), 5.0f);  // staged, not yet committed
  const auto bytes = tequant::state_bytes(m);

  ema_manager<tequant::autocast_entry> fresh(params(0.75f));
  tequant::load_state(fresh, bytes);
  CHECK(tequant::state_bytes(fresh) == bytes);
  const auto s = fresh.slot(tequant::module_handle{0}, tequant::forward_role::input, 1);
  CHECK(bits(fresh.scale(s)) == bits(m.scale(s)));
  CHECK(fresh.staging_amax(fresh.slot(tequant::module_handle{0}, tequant::backward_role::grad_output, 1)) == 5.0f);

  ema_manager<tequant::autocast_entry> other(params(0.5f));
  try {
    tequant::load_state(other, bytes);
    FAIL("loading state written with another decay must fail");
  } catch (const tequant::error& e) {
    CHECK(std::string(e.what()).find("decay") != std::string::npos);
  }
  CHECK(other.module_count() == 0);  // nothing adopted

  tequant::quantization_manager<tequant::delayed_scaling<>, tequant::autocast_entry> delayed(tequant::delayed_params{});
  CHECK_THROWS_AS(tequant::load_state(delayed, bytes), tequant::error);  // another recipe's file
}

TEST_CASE("ema_current_scaling: bad params are refused by the manager's constructor") {
  CHECK_THROWS_WITH_AS(ema_manager<tequant::autocast_entry>(params(1.0f)), doctest::Contains("decay"),
                       tequant::error);
}

TEST_CASE("every_k_backwards: one backward update every k logical backwards, amaxes max-accumulated") {
  tequant::quantization_manager<tequant::delayed_scaling<>, every_k_backwards> m(tequant::delayed_params{},
                                                                                  every_k_backwards(3));
  const auto h = m.register_module("lin", 1);
  const auto g = m.slot(h, tequant::backward_role::grad_output, 0);
  std::vector<std::uint64_t> after;
  for (int step = 0; step < 7; ++step) {
    { auto region = m.autocast(); }
    cast(m, g, step == 1 ? 100.0f : 1.0f);  // the module backward: a cast and a request
    m.request_backward_update();
    after.push_back(m.stats().backward_updates);
  }
  // Entries of steps 1..6 end backwards 0..5; the 3rd and the 6th flush (at steps 3 and 6).
  CHECK(after == std::vector<std::uint64_t>{0, 0, 0, 1, 1, 1, 2});
  CHECK(m.boundary().seen() == 0);
  CHECK(m.stats().pending);  // step 6's request waits for two more backwards
  // The first update committed the max over steps 0-2 (100) into the window: E5M2's max / 100.
  CHECK(bits(m.scale(g)) == bits(57344.0f / 100.0f));
}

TEST_CASE("every_k_backwards: backward scopes count as logical backwards, with or without requests") {
  tequant::quantization_manager<tequant::delayed_scaling<>, every_k_backwards> m(tequant::delayed_params{},
                                                                                  every_k_backwards(2));
  (void)m.register_module("lin", 1);
  for (int step = 0; step < 4; ++step) {
    { auto region = m.autocast(); }
    auto scope = m.backward_scope();
  }
  CHECK(m.stats().backward_updates == 2);
  CHECK(!m.stats().pending);
  CHECK_THROWS_AS(every_k_backwards(0), tequant::error);
}
