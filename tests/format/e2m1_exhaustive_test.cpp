// SPDX-License-Identifier: Apache-2.0
// E2M1 against NVIDIA's own conversion (cuda_fp4.h, host path): every one of the 2^32 floats and every
// bf16 bit pattern.
#include <doctest/doctest.h>

#include <cuda_fp4.h>

#include <cstdint>
#include <cmath>

#include "format/exhaustive_sweep.hpp"
#include "tequant/format/e2m1.hpp"
#include "tequant/format/half.hpp"

TEST_CASE("e2m1: all 2^32 floats encode like __nv_cvt_float_to_fp4(E2M1, cudaRoundNearest)") {
  const auto bad = format_test::first_mismatch(1ull << 32, [](std::uint32_t u) {
    const float x = tequant::detail::bits_float(u);
    return tequant::encode_e2m1(x) == __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest);
  });
  INFO("first mismatching float bits: " << std::hex << bad);
  CHECK(bad == ~0ull);
}

TEST_CASE("e2m1: all bf16 encode like __nv_cvt_bfloat16raw_to_fp4(E2M1, cudaRoundNearest)") {
  const auto bad = format_test::first_mismatch(1ull << 16, [](std::uint32_t u) {
    __nv_bfloat16_raw raw;
    raw.x = static_cast<unsigned short>(u);
    const tequant::bf16 h{static_cast<std::uint16_t>(u)};
    return tequant::encode_e2m1(tequant::to_float(h)) == __nv_cvt_bfloat16raw_to_fp4(raw, __NV_E2M1, cudaRoundNearest);
  });
  INFO("first mismatching bf16 bits: " << std::hex << bad);
  CHECK(bad == ~0ull);
}

TEST_CASE("e2m1: all 16 codes decode like __nv_cvt_fp4_to_halfraw") {
  for (unsigned c = 0; c < 16; ++c) {
    const __half_raw h = __nv_cvt_fp4_to_halfraw(static_cast<__nv_fp4_storage_t>(c), __NV_E2M1);
    // fp16 -> float by hand (every E2M1 value is a normal fp16 or zero).
    const unsigned sign = (h.x >> 15) & 1u, e = (h.x >> 10) & 0x1Fu, m = h.x & 0x3FFu;
    const float mag = e == 0 ? 0.0f : std::ldexp(1.0f + static_cast<float>(m) / 1024.0f, static_cast<int>(e) - 15);
    const float v = sign ? -mag : mag;
    INFO("code " << c);
    CHECK(tequant::decode_e2m1(static_cast<std::uint8_t>(c)) == v);
    CHECK(std::signbit(tequant::decode_e2m1(static_cast<std::uint8_t>(c))) == std::signbit(v));
  }
}
