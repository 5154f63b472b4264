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

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
#  include <immintrin.h>

#  include "tequant/detail/host_nvfp4.hpp"

namespace {
// Eight consecutive float bit patterns through the host's AVX2 E2M1 encoder, against the scalar one.
TEQUANT_TARGET_AVX2 bool avx2_e2m1_like_scalar(std::uint32_t base) {
  alignas(32) std::uint32_t in[8];
  alignas(32) std::int32_t out[8];
  for (std::uint32_t k = 0; k < 8; ++k) in[k] = base + k;
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     tequant::detail::avx2::encode_e2m1_8(_mm256_load_ps(reinterpret_cast<const float*>(in))));
  for (int k = 0; k < 8; ++k)
    if (out[k] != tequant::encode_e2m1(tequant::detail::bits_float(in[k]))) return false;
  return true;
}
}  // namespace

TEST_CASE("host AVX2 E2M1 encoder: all 2^32 floats encode like the scalar encoder") {
  if (!tequant::detail::host_has_avx2()) return;  // nothing to compare on this CPU
  const auto bad = format_test::first_mismatch(1ull << 32, [](std::uint32_t u) { return (u & 7u) != 0 || avx2_e2m1_like_scalar(u); });
  INFO("first mismatching group of 8 float bits starts at: " << std::hex << bad);
  CHECK(bad == ~0ull);
}
#endif
