// SPDX-License-Identifier: Apache-2.0
// One field-by-field comparison of two cast plans, for the tests that check that both plan_cast
// overloads (slot id and cast handle) give the same plan.
#pragma once

#include <doctest/doctest.h>

#include "tequant/cast_plan.hpp"
#include "tequant/format/bits.hpp"

namespace tequant_test {

/// Every field the same; amax_epsilon by its bits (a -0 or a NaN payload must not pass).
inline void check_same_plan(const tequant::cast_plan& a, const tequant::cast_plan& b) {
  CHECK(a.scale == b.scale);
  CHECK(a.amax == b.amax);
  CHECK(a.dtype == b.dtype);
  CHECK(a.mode == b.mode);
  CHECK(a.enabled == b.enabled);
  CHECK(a.tile_2d == b.tile_2d);
  CHECK(a.power_2_scale == b.power_2_scale);
  CHECK(tequant::detail::float_bits(a.amax_epsilon) == tequant::detail::float_bits(b.amax_epsilon));
  CHECK(a.rng_offset == b.rng_offset);
  CHECK(a.rng_seed == b.rng_seed);
  CHECK(a.columnwise_rht == b.columnwise_rht);
}

}  // namespace tequant_test
