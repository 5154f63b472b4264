// SPDX-License-Identifier: Apache-2.0
// tequant::cast_cache: a slot's cast is reused while its key, tensor, scale and plan stay the same, and
// redone (amax recorded again) when any of them changes.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/cast_cache.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

using namespace tequant;
using cache = cast_cache<host_backend>;

std::vector<float> ramp(std::size_t n, float k) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = k * (float(i % 17) - 8.0f);
  return v;
}
std::vector<std::uint8_t> codes(quantized_tensor<host_backend>& q) {
  auto o = q.output();
  return {o.rowwise_data.begin(), o.rowwise_data.end()};
}

}  // namespace

TEST_CASE("cast_cache: same key, tensor and scale reuse the cast; the amax is recorded once") {
  host_backend be;
  std::vector<float> w = ramp(64 * 32, 0.5f);
  float scale = 4.0f, amax = 0.0f;
  cast_plan plan;
  plan.scale = &scale;
  plan.amax = &amax;
  cache c;
  bool cast_now = false;
  const matrix_view<const float> v{w.data(), 64, 32};
  const auto first = codes(c.cast(be, plan, v, {7, 0}, &cast_now));
  CHECK(cast_now);
  CHECK(amax == 4.0f);
  amax = 0.0f;  // a second recording would show up here
  // Values changed without a new version: the cached codes come back (the caller's contract is to bump).
  w[0] = 100.0f;
  CHECK(codes(c.cast(be, plan, v, {7, 0}, &cast_now)) == first);
  CHECK_FALSE(cast_now);
  CHECK(amax == 0.0f);
  CHECK(c.casts() == 1);
  CHECK(c.reuses() == 1);
  // A new version, a new step, a new scale, a new shape or address: cast again.
  c.cast(be, plan, v, {7, 1}, &cast_now);
  CHECK(cast_now);
  CHECK(amax == 100.0f);
  c.cast(be, plan, v, {8, 1}, &cast_now);
  CHECK(cast_now);
  scale = 2.0f;
  c.cast(be, plan, v, {8, 1}, &cast_now);
  CHECK(cast_now);
  c.cast(be, plan, matrix_view<const float>{w.data(), 32, 64}, {8, 1}, &cast_now);
  CHECK(cast_now);
  c.cast(be, plan, matrix_view<const float>{w.data() + 32, 32, 32}, {8, 1}, &cast_now);
  CHECK(cast_now);
  CHECK(c.casts() == 6);
}

TEST_CASE("cast_cache: a replay's plan (same scale, no amax) hits; a recording plan never hits a silent cast") {
  host_backend be;
  const std::vector<float> w = ramp(32 * 32, 0.25f);
  const matrix_view<const float> v{w.data(), 32, 32};
  float scale = 8.0f, snapshot = 8.0f, amax = 0.0f;
  cast_plan forward, replay;
  forward.scale = &scale;
  forward.amax = &amax;
  replay.scale = &snapshot;  // another address, the same value
  cache c;
  bool cast_now = false;
  c.cast(be, forward, v, {1, 0});
  c.cast(be, replay, v, {1, 0}, &cast_now);
  CHECK_FALSE(cast_now);

  cache d;
  d.cast(be, replay, v, {1, 0});
  d.cast(be, forward, v, {1, 0}, &cast_now);
  CHECK(cast_now);
  CHECK(amax == 2.0f);
}

TEST_CASE("cast_cache: per-block and current-scaling plans are cached too; plan options are part of the key") {
  host_backend be;
  const std::vector<float> w = ramp(64 * 64, 0.1f);
  const matrix_view<const float> v{w.data(), 64, 64};
  for (scaling_mode mode : {scaling_mode::tensor_current, scaling_mode::mxfp8, scaling_mode::block}) {
    CAPTURE(to_string(mode));
    cast_plan plan;
    plan.mode = mode;
    cache c;
    bool cast_now = false;
    const auto first = codes(c.cast(be, plan, v, {3, 0}));
    CHECK(codes(c.cast(be, plan, v, {3, 0}, &cast_now)) == first);
    CHECK_FALSE(cast_now);
    plan.dtype = fp8_dtype::e5m2;
    c.cast(be, plan, v, {3, 0}, &cast_now);
    CHECK(cast_now);
    plan.tile_2d = true;
    c.cast(be, plan, v, {3, 0}, &cast_now);
    CHECK(cast_now);
  }
}

TEST_CASE("cast_cache: stochastic rounding always casts; a disabled plan is a tequant: error and changes nothing") {
  host_backend be;
  const std::vector<float> w = ramp(32 * 32, 1.0f);
  const matrix_view<const float> v{w.data(), 32, 32};
  cast_plan plan;
  plan.mode = scaling_mode::tensor_current;
  std::uint64_t offset = 0;
  plan.rng_offset = &offset;
  plan.rng_seed = 5;
  cache c;
  bool cast_now = false;
  c.cast(be, plan, v, {1, 0});
  c.cast(be, plan, v, {1, 0}, &cast_now);
  CHECK(cast_now);
  plan.enabled = false;
  CHECK_THROWS_WITH_AS(c.cast(be, plan, v, {1, 0}), doctest::Contains("tequant: cast_cache::cast: the plan is disabled"),
                       tequant::error);
  CHECK(c.valid());  // refused before anything changed: the cached cast stays
}

TEST_CASE("cast_cache with a manager: the delayed forward update changes the scale, so the next cast misses") {
  using manager = quantization_manager<delayed_scaling<>, explicit_scope, no_recompute>;
  manager m;
  const module_handle h = m.register_module("fc");
  const slot_id slot = m.slot(h, forward_role::weight);
  const std::vector<float> w = ramp(32 * 32, 3.0f);
  const matrix_view<const float> v{w.data(), 32, 32};
  cache c;
  bool cast_now = false;
  {
    auto region = m.autocast(true);
    c.cast(m.backend(), m.plan_cast(slot), v, {0, 0}, &cast_now);
    CHECK(cast_now);
    c.cast(m.backend(), m.plan_cast(slot), v, {0, 0}, &cast_now);  // a second micro-batch
    CHECK_FALSE(cast_now);
    CHECK(m.staging_amax(slot) == 24.0f);
  }
  CHECK(m.stats().forward_updates == 1);
  const float before = 1.0f;  // delayed scaling starts at scale 1
  CHECK(m.scale(slot) != before);
  auto region = m.autocast(true);
  c.cast(m.backend(), m.plan_cast(slot), v, {0, 0}, &cast_now);  // same key, new scale
  CHECK(cast_now);
}
