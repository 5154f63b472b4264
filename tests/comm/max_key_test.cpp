// SPDX-License-Identifier: Apache-2.0
// The float -> key map that lets an integer MAX reduce amaxes with fmaxf semantics on every rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tequant/comm/max_key.hpp"

namespace {

using tequant::detail::float_from_max_key;
using tequant::detail::float_max_key;

std::uint32_t key(float x) { return float_max_key(std::bit_cast<std::uint32_t>(x)); }

/// The reference: fmaxf over all ranks, with +0 preferred to -0 so it is order-free.
float reference_max(const std::vector<float>& v) {
  float m = std::numeric_limits<float>::quiet_NaN();
  for (float x : v) {
    if (std::isnan(m) || x > m || (x == m && !std::signbit(x))) m = std::isnan(x) ? m : x;
  }
  return m;
}

}  // namespace

TEST_CASE("max keys: order-preserving over non-NaN floats, NaN below everything") {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> ascending{-inf, -3.0e38f, -1.0f, -1e-45f, -0.0f, 0.0f, 1e-45f, 1.17549435e-38f,
                                     1.0f, 448.0f, 3.4028235e38f, inf};
  for (std::size_t i = 1; i < ascending.size(); ++i) CHECK(key(ascending[i - 1]) < key(ascending[i]));
  CHECK(key(std::numeric_limits<float>::quiet_NaN()) < key(-inf));
  CHECK(key(-std::numeric_limits<float>::quiet_NaN()) == key(std::numeric_limits<float>::quiet_NaN()));
  CHECK(key(std::bit_cast<float>(0x7F800001u)) == tequant::detail::max_key_nan);  // signalling NaN
}

TEST_CASE("max keys: every non-NaN bit pattern round-trips, NaNs become the canonical quiet NaN") {
  std::mt19937 rng(7);
  for (int i = 0; i < 200000; ++i) {
    const std::uint32_t u = rng();
    const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
    const std::uint32_t back = float_from_max_key(float_max_key(u));
    if (nan)
      CHECK(back == tequant::detail::canonical_quiet_nan);
    else
      REQUIRE(back == u);
  }
  for (std::uint32_t u : {0u, 0x80000000u, 0x7F800000u, 0xFF800000u, 0x7F7FFFFFu, 0x00000001u, 0x80000001u})
    CHECK(float_from_max_key(float_max_key(u)) == u);
}

TEST_CASE("max keys: max over keys = fmaxf with NaN ignored, the same bits in every combining order") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> cases{
      {1.0f, nan, 3.0f}, {nan, nan}, {-0.0f, 0.0f}, {0.0f, -0.0f}, {nan, 0.0f},
      {std::numeric_limits<float>::infinity(), nan, 2.0f}, {5.0f, 4.0f, 0.0f, 5.0f}};
  for (auto v : cases) {
    const float want = reference_max(v);
    std::sort(v.begin(), v.end(), [](float a, float b) { return key(a) < key(b); });
    do {
      std::vector<float> buf = v;
      tequant::detail::encode_max_keys(buf.data(), buf.size());
      std::uint32_t m = 0;
      for (float f : buf) m = std::max(m, std::bit_cast<std::uint32_t>(f));
      const float got = std::bit_cast<float>(float_from_max_key(m));
      if (std::isnan(want))
        CHECK(std::bit_cast<std::uint32_t>(got) == tequant::detail::canonical_quiet_nan);
      else
        CHECK(std::bit_cast<std::uint32_t>(got) == std::bit_cast<std::uint32_t>(want));
    } while (std::next_permutation(v.begin(), v.end(), [](float a, float b) { return key(a) < key(b); }));
  }
}

TEST_CASE("max keys: encode then decode restores a buffer in place") {
  std::vector<float> v{0.0f, 1.5f, -2.0f, 448.0f, std::numeric_limits<float>::infinity()};
  const std::vector<float> orig = v;
  tequant::detail::encode_max_keys(v.data(), v.size());
  tequant::detail::decode_max_keys(v.data(), v.size());
  for (std::size_t i = 0; i < v.size(); ++i) CHECK(std::bit_cast<std::uint32_t>(v[i]) == std::bit_cast<std::uint32_t>(orig[i]));
}
