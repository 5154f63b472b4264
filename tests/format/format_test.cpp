// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>

#include "format/numerics_suite.hpp"
#include "tequant/error.hpp"

TEST_CASE("fp8: every code decodes to its exact value and round-trips") { numerics_suite::check_fp8_decode_all_codes(); }
TEST_CASE("fp8: edges (NaN, inf, ties, sign of zero)") { numerics_suite::check_fp8_edges(); }
TEST_CASE("bf16 and fp16 conversions") { numerics_suite::check_half_types(); }
TEST_CASE("scale_from_amax edge rules") { numerics_suite::check_scale_from_amax(); }
TEST_CASE("e8m0 encode, decode and multiplier") { numerics_suite::check_e8m0(); }

TEST_CASE("e5m2 is rejected as a training format with a clear error") {
  CHECK_NOTHROW(tequant::check_training_format(tequant::fp8_format::hybrid, "delayed_scaling"));
  CHECK_THROWS_WITH_AS(tequant::check_training_format(tequant::fp8_format::e5m2, "delayed_scaling"),
                       doctest::Contains("tequant: delayed_scaling: fp8_format::e5m2 is not a training format"),
                       tequant::error);
}
