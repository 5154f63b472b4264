// SPDX-License-Identifier: Apache-2.0
// E2M1 at named edge values (the exhaustive comparison with cuda_fp4.h is e2m1_exhaustive_test).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "tequant/format/e2m1.hpp"

using tequant::decode_e2m1;
using tequant::encode_e2m1;
using tequant::encode_e2m1_stochastic;

TEST_CASE("e2m1: every code decodes to its value and round-trips") {
  const float values[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  for (std::uint8_t c = 0; c < 16; ++c) {
    const float v = decode_e2m1(c);
    CHECK(std::fabs(v) == values[c & 7]);
    CHECK(std::signbit(v) == ((c & 8) != 0));
    CHECK(encode_e2m1(v) == c);
  }
}

TEST_CASE("e2m1: ties to even, saturation, NaN, signed zero") {
  struct edge {
    float x;
    std::uint8_t code;
  };
  const float inf = std::numeric_limits<float>::infinity();
  const edge edges[] = {
      {0.25f, 0x0},          {std::nextafter(0.25f, 1.0f), 0x1}, {0.75f, 0x2}, {std::nextafter(0.75f, 0.0f), 0x1},
      {1.25f, 0x2},          {1.75f, 0x4},  {2.5f, 0x4},  {3.5f, 0x6}, {5.0f, 0x6},
      {std::nextafter(5.0f, 6.0f), 0x7},  {6.5f, 0x7},  {1e30f, 0x7}, {inf, 0x7}, {-inf, 0xF},
      {-0.0f, 0x8},          {-0.1f, 0x8},  {1e-45f, 0x0}, {-6.0f, 0xF}, {-2.6f, 0xD},
      {std::numeric_limits<float>::quiet_NaN(), 0x7}, {-std::numeric_limits<float>::quiet_NaN(), 0x7},
  };
  for (const edge& e : edges) {
    INFO("x = " << e.x);
    CHECK(encode_e2m1(e.x) == e.code);
  }
}

TEST_CASE("e2m1 stochastic: exact values never move, bounds are the neighbours, draws decide") {
  for (std::uint8_t c = 0; c < 16; ++c) {
    CHECK(encode_e2m1_stochastic(decode_e2m1(c), 0u) == (c == 8 ? 0x8 : c));
    CHECK(encode_e2m1_stochastic(decode_e2m1(c), 0xFFFFFFFFu) == (c == 8 ? 0x8 : c));
  }
  // 2.25 lies a quarter of the way from 2 (0x4) to 3 (0x5).
  CHECK(encode_e2m1_stochastic(2.25f, 0u) == 0x5);
  CHECK(encode_e2m1_stochastic(2.25f, 0x3FFFFF00u) == 0x5);
  CHECK(encode_e2m1_stochastic(2.25f, 0x40000000u) == 0x4);
  CHECK(encode_e2m1_stochastic(-2.25f, 0u) == 0xD);
  CHECK(encode_e2m1_stochastic(7.0f, 0u) == 0x7);
  CHECK(encode_e2m1_stochastic(-std::numeric_limits<float>::infinity(), 0u) == 0xF);
  CHECK(encode_e2m1_stochastic(std::numeric_limits<float>::quiet_NaN(), 0u) == 0x7);
}
