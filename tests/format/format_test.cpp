// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>

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

TEST_CASE("error messages print every kind of part exactly (error.hpp formats without <charconv>)") {
  const auto message = [](auto... parts) {
    try {
      tequant::detail::fail(parts...);
    } catch (const tequant::error& e) {
      return std::string(e.what());
    }
    return std::string("(no throw)");
  };
  CHECK(message("n=", -9223372036854775807LL - 1, " u=", 18446744073709551615ULL, " i=", -7, " z=", 0u) ==
        "tequant: n=-9223372036854775808 u=18446744073709551615 i=-7 z=0");
  CHECK(message('c', true, false, " x=", 0.5, " y=", 1e20f, " s=", std::string("str")) ==
        "tequant: c10 x=0.5 y=1e+20 s=str");
  enum class small : unsigned char { seven = 7 };
  CHECK(message("e=", small::seven, " w=", std::uint64_t{1} << 40) == "tequant: e=7 w=1099511627776");
}
