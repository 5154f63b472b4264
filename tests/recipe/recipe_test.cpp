// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <type_traits>

#include "tequant/backend/host.hpp"
#include "tequant/recipe.hpp"

namespace {
struct half_of_max {  // a user window algorithm, fused into the update pass
  constexpr float operator()(float, float w) const noexcept { return w * 0.5f; }
};
struct not_a_recipe {};
}  // namespace

static_assert(tequant::scaling_recipe<tequant::delayed_scaling<half_of_max>>);
static_assert(tequant::stateful_recipe_for<tequant::delayed_scaling<tequant::most_recent>, tequant::host_backend>);
static_assert(!tequant::stateless_recipe<tequant::delayed_scaling<>>);
static_assert(!tequant::scaling_recipe<not_a_recipe>);
static_assert(tequant::stateless_recipe<tequant::current_scaling>);
static_assert(tequant::stateless_recipe<tequant::mxfp8_scaling>);
static_assert(tequant::stateless_recipe<tequant::block_scaling>);
static_assert(!tequant::stateful_recipe_for<tequant::block_scaling, tequant::host_backend>);
static_assert(tequant::delayed_scaling<>::scaled_max(tequant::fp8_dtype::e4m3, 0) == 448.0f);
static_assert(tequant::delayed_scaling<>::scaled_max(tequant::fp8_dtype::e4m3, 3) == 56.0f);
static_assert(tequant::delayed_scaling<>::scaled_max(tequant::fp8_dtype::e5m2, -2) == 57344.0f * 4.0f);

TEST_CASE("recipe params defaults follow TE") {
  tequant::delayed_params d{};
  CHECK(d.format == tequant::fp8_format::hybrid);
  CHECK(d.history_length == 1024);
  CHECK(d.margin == 0);
  CHECK(d.reduce_amax);
  CHECK(tequant::mxfp8_params{}.format == tequant::fp8_format::e4m3);
  CHECK(tequant::block_params{}.power_2_scale);
  CHECK_FALSE(tequant::current_params{}.power_2_scale);
  CHECK(tequant::delayed_scaling<>::dtype(d, tequant::direction::backward) == tequant::fp8_dtype::e5m2);
  CHECK(tequant::delayed_scaling<>::update_args(d, tequant::direction::forward).scaled_max == 448.0f);
}

TEST_CASE("recipe validate rejects unusable params with a tequant: message") {
  using tequant::error;
  CHECK_NOTHROW(tequant::delayed_scaling<>::validate({}));
  CHECK_THROWS_WITH_AS(tequant::delayed_scaling<>::validate({.format = tequant::fp8_format::e5m2}),
                       doctest::Contains("tequant: delayed_scaling: fp8_format::e5m2"), error);
  CHECK_THROWS_WITH_AS(tequant::delayed_scaling<>::validate({.history_length = 0}),
                       doctest::Contains("tequant: delayed_scaling: history_length 0"), error);
  CHECK_THROWS_WITH_AS(tequant::delayed_scaling<>::validate({.margin = 1000}),
                       doctest::Contains("tequant: delayed_scaling: margin 1000"), error);
  CHECK_THROWS_WITH_AS(tequant::current_scaling::validate({.amax_epsilon = -1.0f}),
                       doctest::Contains("tequant: current_scaling: amax_epsilon"), error);
  CHECK_THROWS_AS(tequant::mxfp8_scaling::validate({.format = tequant::fp8_format::e5m2}), error);
  CHECK_THROWS_AS(tequant::block_scaling::validate({.format = tequant::fp8_format::e5m2}), error);
  CHECK_NOTHROW(tequant::block_scaling::validate({}));
}

TEST_CASE("stateless recipe scales follow compute_scale_from_amax") {
  using tequant::fp8_dtype;
  CHECK(tequant::current_scaling::scale(2.0f, fp8_dtype::e4m3, false, 0.0f) == 224.0f);
  CHECK(tequant::current_scaling::scale(3.0f, fp8_dtype::e4m3, true, 0.0f) == 128.0f);
  CHECK(tequant::current_scaling::scale(0.0f, fp8_dtype::e4m3, false, 0.0f) == 1.0f);
  CHECK(tequant::current_scaling::scale(1e-45f, fp8_dtype::e4m3, false, 0.0f) == 3.40282347e38f);
  // Block scaling replaces an infinite scale by the input type's max (bf16 here), not FLT_MAX.
  CHECK(tequant::block_scaling::scale(1e-45f, fp8_dtype::e4m3, false, 0.0f, 3.38953139e38f) == 3.38953139e38f);
}
