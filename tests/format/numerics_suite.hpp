// SPDX-License-Identifier: Apache-2.0
// Numerics checks written once and compiled by the host test and by the CUDA test (nvcc), so the same
// constexpr formulas are proven under both compilers. Expects doctest to be included.
#pragma once
#include <cmath>
#include <cstdint>

#include "tequant/format/e8m0.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/half.hpp"
#include "tequant/format/scale.hpp"

namespace numerics_suite {
using tequant::detail::bits_float;
using tequant::detail::float_bits;

// Compile-time facts: the formulas are constexpr, so a wrong edge case fails the build.
static_assert(tequant::encode_e4m3(448.0f) == 0x7E);
static_assert(tequant::encode_e4m3(1e30f) == 0x7E);
static_assert(tequant::encode_e4m3(-1e30f) == 0xFE);
static_assert(tequant::encode_e5m2(57344.0f) == 0x7B);
static_assert(tequant::encode_e4m3(-0.0f) == 0x80);
static_assert(tequant::encode_e4m3(0.0f) == 0x00);
static_assert(tequant::encode_e4m3(1.0f) == 0x38);
static_assert(tequant::decode_e4m3(0x38) == 1.0f);
static_assert(tequant::decode_e4m3(0x01) == 0.001953125f);  // 2^-9, smallest subnormal
static_assert(tequant::decode_e5m2(0x01) == 1.52587890625e-05f);  // 2^-16
static_assert(tequant::to_float(tequant::to_bf16(1.0f)) == 1.0f);
static_assert(tequant::to_float(tequant::to_fp16(65504.0f)) == 65504.0f);
static_assert(tequant::encode_e8m0(1.0f) == 127);
static_assert(tequant::encode_e8m0(1.5f) == 128);
static_assert(tequant::e8m0_multiplier(127) == 1.0f);
static_assert(tequant::scale_from_amax(0.0f, 448.0f) == 1.0f);
static_assert(tequant::dtype_for(tequant::fp8_format::hybrid, tequant::direction::backward) == tequant::fp8_dtype::e5m2);

inline bool is_nan_bits(float f) { return (float_bits(f) & 0x7FFFFFFFu) > 0x7F800000u; }

inline void check_fp8_decode_all_codes() {
  for (int c = 0; c < 256; ++c) {
    const auto q = static_cast<std::uint8_t>(c);
    // Reference decode from the definition: sign * 2^(e-bias) * (1 + m/2^M), subnormal when e == 0.
    auto ref = [&](int mant_bits, int bias) {
      const int e = (c & 0x7F) >> mant_bits;
      const int m = c & ((1 << mant_bits) - 1);
      double v = e == 0 ? m * std::ldexp(1.0, 1 - bias - mant_bits)
                        : (1.0 + m / double(1 << mant_bits)) * std::ldexp(1.0, e - bias);
      return static_cast<float>((c & 0x80) ? -v : v);
    };
    const float e4 = tequant::decode_e4m3(q);
    if ((c & 0x7F) == 0x7F) {
      CHECK(is_nan_bits(e4));
    } else {
      CHECK(float_bits(e4) == float_bits(ref(3, 7)));
      CHECK(tequant::encode_e4m3(e4) == q);  // every finite code round-trips
    }
    const float e5 = tequant::decode_e5m2(q);
    if ((c & 0x7C) == 0x7C) {
      CHECK(((c & 3) ? is_nan_bits(e5) : e5 == ((c & 0x80) ? -INFINITY : INFINITY)));
    } else {
      CHECK(float_bits(e5) == float_bits(ref(2, 15)));
      CHECK(tequant::encode_e5m2(e5) == q);
    }
  }
}

inline void check_fp8_edges() {
  CHECK(tequant::encode_e4m3(NAN) == 0x7F);
  CHECK(tequant::encode_e4m3(-NAN) == 0x7F);
  CHECK(tequant::encode_e5m2(-NAN) == 0x7F);
  CHECK(tequant::encode_e4m3(INFINITY) == 0x7E);
  CHECK(tequant::encode_e4m3(-INFINITY) == 0xFE);
  CHECK(tequant::encode_e5m2(INFINITY) == 0x7B);
  CHECK(tequant::encode_e4m3(464.0f) == 0x7E);  // tie at max + half ulp rounds to even (max)
  CHECK(tequant::encode_e4m3(0.0009765625f) == 0x00);  // exactly half the smallest subnormal: to even (0)
  CHECK(tequant::encode_e4m3(0.0009765626f) == 0x01);
  CHECK(tequant::encode_e4m3(0.0029296875f) == 0x02);  // 1.5 * 2^-9: tie to even (2)
  CHECK(tequant::encode_e4m3(-1e-45f) == 0x80);  // float denormal underflows to -0
}

inline void check_half_types() {
  CHECK(tequant::to_bf16(1.00390625f).bits == 0x3F80);  // tie to even
  CHECK(tequant::to_bf16(1.01171875f).bits == 0x3F82);  // tie, odd below: rounds up
  CHECK(is_nan_bits(tequant::to_float(tequant::to_bf16(NAN))));
  CHECK(tequant::to_fp16(65520.0f).bits == 0x7C00);  // rounds past max: inf
  CHECK(tequant::to_fp16(65519.0f).bits == 0x7BFF);
  CHECK(tequant::to_fp16(5.9604644775390625e-08f).bits == 0x0001);  // 2^-24
  CHECK(tequant::to_fp16(2.98023223876953125e-08f).bits == 0x0000);  // 2^-25: tie to even (0)
  for (std::uint32_t h = 0; h < 0x10000; ++h) {  // every finite half round-trips through float
    const tequant::fp16 x{static_cast<std::uint16_t>(h)};
    if ((h & 0x7C00) == 0x7C00) continue;
    CHECK(tequant::to_fp16(tequant::to_float(x)).bits == h);
  }
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const tequant::bf16 x{static_cast<std::uint16_t>(b)};
    if ((b & 0x7F80) == 0x7F80 && (b & 0x7F)) continue;
    CHECK(tequant::to_bf16(tequant::to_float(x)).bits == b);
  }
}

inline void check_scale_from_amax() {
  using tequant::scale_from_amax;
  const float m = 448.0f;
  CHECK(scale_from_amax(0.0f, m) == 1.0f);
  CHECK(scale_from_amax(-0.0f, m) == 1.0f);
  CHECK(scale_from_amax(INFINITY, m) == 1.0f);
  CHECK(scale_from_amax(NAN, m) == 1.0f);
  CHECK(scale_from_amax(2.0f, m) == 224.0f);
  CHECK(scale_from_amax(3.0f, m) == 448.0f / 3.0f);
  CHECK(scale_from_amax(3.0f, m, true) == 128.0f);  // 149.33 rounds down to a power of two
  CHECK(scale_from_amax(1e-40f, m) == tequant::detail::float_max);  // denormal amax overflows: value_for_inf
  CHECK(scale_from_amax(1e-40f, m, false, 0.0f, 65504.0f) == 65504.0f);
  CHECK(scale_from_amax(1e-40f, m, true) == 0x1p127f);  // FLT_MAX truncated to 2^127
  CHECK(scale_from_amax(0.0f, m, false, 0.5f) == 896.0f);  // amax floored at eps
  CHECK(scale_from_amax(0.25f, m, false, 0.5f) == 896.0f);
  CHECK(scale_from_amax(1.0f, m, false, 0.5f) == 448.0f);
  CHECK(scale_from_amax(NAN, m, false, 0.5f) == 1.0f);  // NaN is not floored
}

inline void check_e8m0() {
  CHECK(tequant::encode_e8m0(NAN) == 255);
  CHECK(tequant::encode_e8m0(INFINITY) == 254);
  CHECK(tequant::encode_e8m0(0.0f) == 0);
  CHECK(tequant::encode_e8m0(0x1p-127f) == 0);
  CHECK(tequant::encode_e8m0(bits_float(0x00400001u)) == 1);  // just above 2^-127
  CHECK(tequant::encode_e8m0(0x1p127f) == 254);
  CHECK(tequant::encode_e8m0(0x1.8p127f) == 254);  // saturates
  CHECK(tequant::encode_e8m0(0x1.000002p-126f) == 2);
  for (int e = 0; e < 255; ++e) {
    const auto code = static_cast<std::uint8_t>(e);
    CHECK(tequant::decode_e8m0(code) * tequant::e8m0_multiplier(code) == 1.0f);
    CHECK(tequant::decode_e8m0(code) == std::ldexp(1.0f, e - 127));
    CHECK(tequant::encode_e8m0(tequant::decode_e8m0(code)) == code);
  }
  CHECK(is_nan_bits(tequant::e8m0_multiplier(255)));
  // The cast's multiplier is TransformerEngine's: 1 for code 0, 0 (flushed 2^-127) for 254, else exact.
  CHECK(tequant::e8m0_cast_multiplier(0) == 1.0f);
  CHECK(tequant::detail::float_bits(tequant::e8m0_cast_multiplier(254)) == 0u);
  for (int e = 1; e < 254; ++e)
    CHECK(tequant::e8m0_cast_multiplier(static_cast<std::uint8_t>(e)) == tequant::e8m0_multiplier(static_cast<std::uint8_t>(e)));
  CHECK(is_nan_bits(tequant::e8m0_cast_multiplier(255)));
}

}  // namespace numerics_suite
