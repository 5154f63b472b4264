// SPDX-License-Identifier: Apache-2.0
// Every one of the 2^32 float inputs against NVIDIA's own conversion (cuda_fp8.h, host path), and E8M0
// against an independent frexp-based reference over every non-negative float.
#include <doctest/doctest.h>

#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>

#include "format/exhaustive_sweep.hpp"
#include "tequant/detail/host_simd.hpp"
#include "tequant/format/e8m0.hpp"
#include "tequant/format/fp8.hpp"

namespace {

float as_float(std::uint32_t u) { return tequant::detail::bits_float(u); }

std::uint8_t e8m0_reference(float v) {
  v = std::fabs(v);
  if (std::isnan(v)) return 255;
  if (std::isinf(v)) return 254;
  if (v == 0.0f) return 0;
  int k = 0;
  const double f = std::frexp(static_cast<double>(v), &k);  // v = f * 2^k, f in [0.5, 1)
  const int ceil_log2 = f == 0.5 ? k - 1 : k;
  return static_cast<std::uint8_t>(std::clamp(ceil_log2 + 127, 0, 254));
}

}  // namespace

TEST_CASE("e4m3: all 2^32 floats encode like __nv_cvt_float_to_fp8(SATFINITE, E4M3)") {
  const auto bad = format_test::first_mismatch(1ull << 32, [](std::uint32_t u) {
    return tequant::encode_e4m3(as_float(u)) == __nv_cvt_float_to_fp8(as_float(u), __NV_SATFINITE, __NV_E4M3);
  });
  INFO("first mismatching float bits: " << std::hex << bad);
  CHECK(bad == ~0ull);
}

TEST_CASE("e5m2: all 2^32 floats encode like __nv_cvt_float_to_fp8(SATFINITE, E5M2)") {
  const auto bad = format_test::first_mismatch(1ull << 32, [](std::uint32_t u) {
    return tequant::encode_e5m2(as_float(u)) == __nv_cvt_float_to_fp8(as_float(u), __NV_SATFINITE, __NV_E5M2);
  });
  INFO("first mismatching float bits: " << std::hex << bad);
  CHECK(bad == ~0ull);
}

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
namespace {
// The host kernels' 8-lane encoder (its rounding is the FPU's, not the scalar encoder's integer RNE).
template <tequant::fp8_dtype D>
TEQUANT_TARGET_AVX2 bool avx2_encodes_like_scalar(std::uint32_t base) {
  alignas(32) std::uint32_t in[8];
  alignas(32) std::int32_t out[8];
  for (std::uint32_t k = 0; k < 8; ++k) in[k] = base + k;
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     tequant::detail::avx2::encode8<D>(_mm256_load_ps(reinterpret_cast<const float*>(in))));
  for (int k = 0; k < 8; ++k) {
    const float f = as_float(in[k]);
    const std::uint8_t want = D == tequant::fp8_dtype::e4m3 ? tequant::encode_e4m3(f) : tequant::encode_e5m2(f);
    if (out[k] != want) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("host AVX2 encoder: all 2^32 floats encode like the scalar encoders (e4m3, e5m2)") {
  if (!tequant::detail::host_has_avx2()) return;  // nothing to compare on this CPU
  for (auto check : {&avx2_encodes_like_scalar<tequant::fp8_dtype::e4m3>, &avx2_encodes_like_scalar<tequant::fp8_dtype::e5m2>}) {
    const auto bad = format_test::first_mismatch(1ull << 32, [&](std::uint32_t u) { return (u & 7u) != 0 || check(u); });
    INFO("first mismatching group of 8 float bits starts at: " << std::hex << bad);
    CHECK(bad == ~0ull);
  }
}

namespace {
// The AVX-512 bf16 kernels' encoder core: the low byte of each lane is the code of |y| (the kernels take
// the sign and NaN from their bf16 inputs).
template <tequant::fp8_dtype D>
TEQUANT_TARGET_AVX512 bool avx512_encodes_like_scalar(std::uint32_t base) {
  alignas(64) std::uint32_t in[16];
  alignas(64) std::uint32_t out[16];
  for (std::uint32_t k = 0; k < 16; ++k) in[k] = base + k;
  _mm512_store_si512(out, tequant::detail::avx512::code_low_bytes16<D>(_mm512_load_ps(reinterpret_cast<const float*>(in))));
  for (int k = 0; k < 16; ++k) {
    const float f = std::fabs(as_float(in[k]));
    if (std::isnan(f)) continue;
    const std::uint8_t want = D == tequant::fp8_dtype::e4m3 ? tequant::encode_e4m3(f) : tequant::encode_e5m2(f);
    if ((out[k] & 0xFFu) != want) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("host AVX-512 encoder core: all 2^32 floats, |y| encodes like the scalar encoders (e4m3, e5m2)") {
  if (!tequant::detail::host_has_avx512()) return;  // nothing to compare on this CPU
  for (auto check : {&avx512_encodes_like_scalar<tequant::fp8_dtype::e4m3>, &avx512_encodes_like_scalar<tequant::fp8_dtype::e5m2>}) {
    const auto bad = format_test::first_mismatch(1ull << 32, [&](std::uint32_t u) { return (u & 15u) != 0 || check(u); });
    INFO("first mismatching group of 16 float bits starts at: " << std::hex << bad);
    CHECK(bad == ~0ull);
  }
}
#endif

TEST_CASE("e8m0: all 2^32 floats against the ceil(log2) reference") {
  const auto bad = format_test::first_mismatch(1ull << 32, [](std::uint32_t u) { return tequant::encode_e8m0(as_float(u)) == e8m0_reference(as_float(u)); });
  INFO("first mismatching float bits: " << std::hex << bad);
  CHECK(bad == ~0ull);
}

TEST_CASE("fp8 decode agrees with cuda_fp8.h for all 256 codes") {
  for (int c = 0; c < 256; ++c) {
    const auto q = static_cast<__nv_fp8_storage_t>(c);
    const float ref4 = __half2float(__half(__nv_cvt_fp8_to_halfraw(q, __NV_E4M3)));
    const float ref5 = __half2float(__half(__nv_cvt_fp8_to_halfraw(q, __NV_E5M2)));
    const float mine4 = tequant::decode_e4m3(static_cast<std::uint8_t>(c));
    const float mine5 = tequant::decode_e5m2(static_cast<std::uint8_t>(c));
    CHECK((std::isnan(ref4) ? std::isnan(mine4) : tequant::detail::float_bits(ref4) == tequant::detail::float_bits(mine4)));
    CHECK((std::isnan(ref5) ? std::isnan(mine5) : tequant::detail::float_bits(ref5) == tequant::detail::float_bits(mine5)));
  }
}
