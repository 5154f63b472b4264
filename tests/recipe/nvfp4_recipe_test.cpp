// SPDX-License-Identifier: Apache-2.0
// nvfp4_scaling through the manager: plans per role, the stochastic-rounding stream as managed state
// (advances per cast, save/load, seed check), and checkpoint replays that reproduce the forward's bits.
#include <doctest/doctest.h>

#include <cstdint>
#include <string_view>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/manager.hpp"
#include "tequant/persistence.hpp"
#include "tequant/quantized_tensor.hpp"
#include "tequant/recipe/nvfp4.hpp"

namespace {

using tequant::backward_role;
using tequant::forward_role;
using tequant::nvfp4_params;
using tequant::nvfp4_scaling;
using manager = tequant::quantization_manager<nvfp4_scaling, tequant::explicit_scope>;

/// A user's variant built on nvfp4_scaling through the recipe concept alone: forward inputs round
/// stochastically too, which is what a checkpoint replay must then reproduce.
struct nvfp4_sr_inputs : nvfp4_scaling {
  static constexpr std::string_view name = "nvfp4_sr_inputs";
  static tequant::cast_plan plan(const nvfp4_params& p, tequant::nvfp4_rng_state& s, tequant::slot_id slot) noexcept {
    tequant::cast_plan c = nvfp4_scaling::plan(p, s, slot);
    if (slot.dir == tequant::direction::forward && tequant::role_of(slot) == tequant::tensor_role::input) {
      c.rng_offset = &s.offsets[slot.index];
      c.rng_seed = s.seed;
    }
    return c;
  }
};
static_assert(tequant::stateful_recipe_for<nvfp4_sr_inputs, tequant::host_backend>);

std::vector<float> ramp(std::size_t n) {
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = 0.013f * static_cast<float>(i % 97) - 0.4f;
  return x;
}

/// Rowwise codes of one cast of x [32, 64] with `plan`.
std::vector<std::uint8_t> cast(const tequant::cast_plan& plan, const std::vector<float>& x) {
  tequant::host_backend be;
  tequant::quantized_tensor<tequant::host_backend> q;
  q.prepare(be, plan, 32, 64);
  be.quantize(tequant::matrix_view<const float>{x.data(), 32, 64}, plan, q.output());
  const auto d = q.output().rowwise_data;
  return {d.begin(), d.end()};
}

}  // namespace

static_assert(tequant::stateful_recipe_for<nvfp4_scaling, tequant::host_backend>);

TEST_CASE("nvfp4_scaling: TE's defaults, the Hadamard transform included") {
  const nvfp4_params p{};
  CHECK(p.weight_2d);
  CHECK(p.stochastic_rounding);
  CHECK(p.random_hadamard_transform);
  CHECK_NOTHROW(nvfp4_scaling::validate(p));
  CHECK_NOTHROW(nvfp4_scaling::validate({.random_hadamard_transform = false}));
  CHECK_NOTHROW(manager(nvfp4_params{.random_hadamard_transform = false}));
}

TEST_CASE("nvfp4_scaling: the columnwise copies of inputs, outputs and gradients get the transform, weights' not") {
  for (const bool rht : {true, false}) {
    manager m(nvfp4_params{.random_hadamard_transform = rht});
    const auto a = m.register_module("a");
    {
      auto ac = m.autocast();
      CHECK(m.plan_cast(m.slot(a, forward_role::input)).columnwise_rht == rht);
      CHECK(m.plan_cast(m.slot(a, forward_role::output)).columnwise_rht == rht);
      const auto w = m.plan_cast(m.slot(a, forward_role::weight));
      CHECK_FALSE(w.columnwise_rht);
      CHECK(w.tile_2d);
    }
    {
      auto s = m.backward_scope();
      const auto g = m.plan_cast(m.slot(a, backward_role::grad_output));
      CHECK(g.columnwise_rht == rht);
      CHECK(g.rng_offset != nullptr);  // transform and stochastic rounding together, as TE's bwd_grad
      CHECK(m.plan_cast(m.slot(a, backward_role::grad_input)).columnwise_rht == rht);
    }
  }
}

TEST_CASE("nvfp4_scaling: a state file keeps random_hadamard_transform; one written without it loads only so") {
  // A file from before the transform existed holds random_hadamard_transform = false (the only value
  // then accepted); its layout is unchanged, so it loads into a manager with the transform off.
  manager old(nvfp4_params{.random_hadamard_transform = false});
  (void)old.register_module("a");
  const auto saved = tequant::state_bytes(old);
  manager same(nvfp4_params{.random_hadamard_transform = false});
  (void)same.register_module("a");
  CHECK_NOTHROW(tequant::load_state(same, saved));
  manager with_rht;
  (void)with_rht.register_module("a");
  CHECK_THROWS_WITH_AS(tequant::load_state(with_rht, saved),
                       doctest::Contains("random_hadamard_transform is false in the file, true in this manager"),
                       tequant::error);
  manager round_trip;
  (void)round_trip.register_module("a");
  CHECK_NOTHROW(tequant::load_state(round_trip, tequant::state_bytes(with_rht)));
}

TEST_CASE("nvfp4_scaling: plans per role; gradients draw from per-slot streams that advance per cast") {
  manager m;
  const auto a = m.register_module("a");
  const auto b = m.register_module("b");
  const auto x = ramp(32 * 64);
  {
    auto ac = m.autocast();
    const auto in = m.plan_cast(m.slot(a, forward_role::input));
    CHECK(in.mode == tequant::scaling_mode::nvfp4);
    CHECK_FALSE(in.tile_2d);
    CHECK(in.rng_offset == nullptr);
    CHECK(in.amax == nullptr);
    CHECK(m.plan_cast(m.slot(a, forward_role::weight)).tile_2d);
    (void)cast(in, x);
  }
  {
    auto s = m.backward_scope();
    const auto g = m.plan_cast(m.slot(a, backward_role::grad_output));
    const auto g2 = m.plan_cast(m.slot(b, backward_role::grad_output));
    REQUIRE(g.rng_offset != nullptr);
    REQUIRE(g2.rng_offset != nullptr);
    CHECK(g.rng_seed == nvfp4_params{}.seed);
    CHECK(*g2.rng_offset - *g.rng_offset == 2 * nvfp4_scaling::slot_stream_stride);  // b's slot is two further
    const std::uint64_t before = *g.rng_offset;
    const auto first = cast(g, x);
    CHECK(*g.rng_offset == before + 2 * (32 * 64 / 4));
    CHECK(cast(m.plan_cast(m.slot(a, backward_role::grad_output)), x) != first);  // the next cast draws anew
    CHECK_FALSE(m.plan_cast(m.slot(a, backward_role::grad_input)).tile_2d);
  }
  CHECK(m.stats().backward_updates == 1);
  CHECK(m.stats().collectives == 0);  // nothing to reduce
}

TEST_CASE("nvfp4_scaling: stream positions survive save/load; another seed is refused") {
  manager m;
  const auto a = m.register_module("a");
  const auto x = ramp(32 * 64);
  {
    auto s = m.backward_scope();
    (void)cast(m.plan_cast(m.slot(a, backward_role::grad_output)), x);
  }
  const auto saved = tequant::state_bytes(m);
  tequant::slot_id g = m.slot(a, backward_role::grad_output);
  std::vector<std::uint8_t> next_original;
  {
    auto s = m.backward_scope();
    next_original = cast(m.plan_cast(g), x);
  }
  manager restored;
  const auto ra = restored.register_module("a");
  tequant::load_state(restored, saved);
  {
    auto s = restored.backward_scope();
    CHECK(cast(restored.plan_cast(restored.slot(ra, backward_role::grad_output)), x) == next_original);
  }
  manager other(nvfp4_params{.seed = 7});
  (void)other.register_module("a");
  CHECK_THROWS_AS(tequant::load_state(other, saved), tequant::error);
}

TEST_CASE("nvfp4: a checkpoint replay casts with the original forward's random bits") {
  using replay_manager = tequant::quantization_manager<nvfp4_sr_inputs, tequant::explicit_scope>;
  replay_manager m;
  const auto a = m.register_module("a");
  const auto x = ramp(32 * 64);
  tequant::checkpoint_frame frame("block");
  std::vector<std::uint8_t> original;
  {
    auto g = m.checkpoint_forward(frame);
    auto ac = m.autocast();
    original = cast(m.plan_cast(m.slot(a, forward_role::input)), x);
  }
  std::vector<std::uint8_t> later;
  {
    auto ac = m.autocast();  // a cast outside the frame advances the live stream
    later = cast(m.plan_cast(m.slot(a, forward_role::input)), x);
  }
  CHECK(later != original);
  {
    auto r = m.checkpoint_replay(frame);
    auto ac = m.autocast();
    CHECK(cast(m.plan_cast(m.slot(a, forward_role::input)), x) == original);
  }
  { auto s = m.backward_scope(); }
}
