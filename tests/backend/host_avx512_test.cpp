// SPDX-License-Identifier: Apache-2.0
// The AVX-512 casts (detail::avx512, chosen at run time where the CPU has AVX-512 F/BW/VL/DQ/VBMI)
// against the portable loops: every bf16 bit pattern times many scales (the scales that fall back to the
// AVX2 kernels included), every pattern times every power of two in the 16-bit-lane encoders (AVX2 and
// AVX-512), the amax pass, tails and misaligned pointers, the streaming path, MXFP8 rows
// (fp32 and bf16) with inf, NaN and zero blocks; the MXFP8 columnwise kernels of fp32 and bf16 (AVX-512
// and AVX2 each called directly, and through the dispatch) with such column blocks, several chunks and
// misaligned outputs; FP8 block scaling (1x128, 128x128; fp32 and bf16). Compiled twice: default flags
// (run-time dispatch) and -march=native (the AVX-512 kernels called directly where the build targets
// them). Elsewhere it checks the AVX2 or portable path.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tequant/backend/host.hpp"

#ifndef TEQUANT_TEST_VARIANT
#  define TEQUANT_TEST_VARIANT "default"
#endif

namespace {

using tequant::bf16;
using tequant::fp8_dtype;
namespace detail = tequant::detail;

bf16 from_bits(std::uint16_t b) {
  bf16 v;
  std::memcpy(&v, &b, 2);
  return v;
}

std::vector<float> test_scales(std::mt19937& rng) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> s = {1.0f, 0.5f, 2.0f, 448.0f / 3.0f, 57344.0f / 7.0f, 0x1p-20f, 0x1p20f, 3.1e-5f, 1.7e38f,
                          std::numeric_limits<float>::max(), std::numeric_limits<float>::denorm_min(), 1e-40f,
                          std::numeric_limits<float>::min(),
                          // Scales the AVX-512 kernel hands to the AVX2 one (x * s may be NaN or flip the sign).
                          0.0f, -0.0f, -1.0f, -3.5f, inf, -inf, std::numeric_limits<float>::quiet_NaN()};
  std::uniform_int_distribution<int> ex(-120, 120);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  for (int i = 0; i < 24; ++i) s.push_back(std::ldexp(mant(rng), ex(rng)));
  return s;
}

template <fp8_dtype D>
void check_scale_encode(const std::vector<bf16>& x, std::size_t off, std::size_t n, float s, std::size_t out_off) {
  std::vector<std::uint8_t> got(n + out_off + 1, 0xAB), want(n + 1, 0);  // + 1: memcmp needs data() != nullptr at n = 0
  std::uint32_t bits = 0;
  detail::scale_encode_host<D>(x.data() + off, n, s, got.data() + out_off, &bits);
  const std::uint32_t want_bits = detail::scale_encode_scalar<D>(x.data() + off, n, s, want.data(), true);
  CHECK(bits == want_bits);
  CHECK(detail::float_bits(detail::amax_host(x.data() + off, n)) == want_bits);  // the amax pass alone
  CHECK(std::memcmp(got.data() + out_off, want.data(), n) == 0);
  CHECK(got[n + out_off] == 0xAB);
  // Without the amax (the current-scaling cast) the same codes.
  std::vector<std::uint8_t> got2(n + 1, 0xCD);
  detail::scale_encode_host<D>(x.data() + off, n, s, got2.data(), nullptr);
  CHECK(std::memcmp(got2.data(), want.data(), n) == 0);
  CHECK(got2[n] == 0xCD);
}

template <fp8_dtype D>
void check_all_patterns() {
  std::mt19937 rng(17);
  std::vector<bf16> x(65536 + 64);
  for (std::size_t i = 0; i < 65536; ++i) x[i] = from_bits(static_cast<std::uint16_t>(i));
  for (std::size_t i = 65536; i < x.size(); ++i) x[i] = from_bits(static_cast<std::uint16_t>(rng()));
  for (const float s : test_scales(rng)) {
    CAPTURE(s);
    check_scale_encode<D>(x, 0, 65536, s, 0);
    check_scale_encode<D>(x, 3, 65536 + 5, s, 7);  // misaligned input and output, a tail of 5
  }
  // Without NaN the AVX2 kernel takes its faster path for scales > 0 and finite (the sign from the input,
  // no per-element NaN test), the per-element one for the others (0 * inf, a negative scale); one NaN
  // anywhere, the head, the vector body or the tail, sends the whole cast back to the per-element path.
  std::vector<bf16> finite;
  for (std::size_t i = 0; i < 65536; ++i)
    if ((i & 0x7FFF) <= 0x7F80) finite.push_back(from_bits(static_cast<std::uint16_t>(i)));
  for (const float s : test_scales(rng)) {
    CAPTURE(s);
    check_scale_encode<D>(finite, 0, finite.size(), s, 0);
    check_scale_encode<D>(finite, 1, finite.size() - 1, s, 3);
  }
  for (const std::size_t at : {std::size_t{0}, std::size_t{33}, finite.size() / 2, finite.size() - 2}) {
    CAPTURE(at);
    std::vector<bf16> one_nan = finite;
    one_nan[at] = from_bits(at % 2 ? 0xFFC1 : 0x7F81);  // 0x7F81: the smallest NaN
    check_scale_encode<D>(one_nan, 0, one_nan.size(), 0.75f, 0);
  }
  // Every length around the 32-element step, at odd offsets, in both directions of the pattern space.
  std::shuffle(x.begin(), x.end(), rng);
  for (std::size_t n = 0; n <= 100; ++n)
    for (const float s : {1.0f, 0x1p-9f, 1e30f, 0.0f}) {
      CAPTURE(n);
      CAPTURE(s);
      check_scale_encode<D>(x, n % 7, n, s, n % 5);
    }
}

}  // namespace

TEST_CASE("AVX-512 bf16 kernels are available where the build targets them [" TEQUANT_TEST_VARIANT "]") {
  MESSAGE("host_has_avx512: " << detail::host_has_avx512() << ", host_has_avx2: " << detail::host_has_avx2());
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__AVX512DQ__) && \
    defined(__AVX512VBMI__) && defined(__AVX2__) && defined(__F16C__) && !defined(TEQUANT_DISABLE_HOST_SIMD)
  CHECK(detail::host_has_avx512());
#endif
}

TEST_CASE("bf16 cast: every bf16 pattern times many scales, tails, misaligned [" TEQUANT_TEST_VARIANT "]") {
  check_all_patterns<fp8_dtype::e4m3>();
  check_all_patterns<fp8_dtype::e5m2>();
}

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
namespace {

/// encode32_pow2 on the 65,536 bf16 patterns times 2^j against the portable cast: the codes of the lanes
/// it does not report, and which lanes it reports (exactly the nonzero subnormals and the products
/// below FP8's smallest normal). The form without the inf test (Inf = false) must give the same report
/// and the same code on every lane but +-inf below 2^pow2_inf_saturates_from. Returns the number of
/// mismatches.
template <fp8_dtype D>
TEQUANT_TARGET_AVX512 std::size_t pow2_mismatches(const std::vector<bf16>& x, int j) {
  const float s = std::ldexp(1.0f, j);
  const double min_normal = std::ldexp(1.0, 1 - detail::fp8_traits<D>::bias);
  std::vector<std::uint8_t> want(x.size());
  detail::scale_encode_scalar<D>(x.data(), x.size(), s, want.data(), false);
  const detail::avx512::pow2_lanes c = detail::avx512::pow2_constants<D>(s);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); i += 32) {
    __mmask32 slow = 0, slow_no_inf = 0;
    alignas(32) std::uint8_t got[32], got_no_inf[32];
    const __m512i a = _mm512_loadu_si512(x.data() + i);
    _mm256_store_si256(reinterpret_cast<__m256i*>(got), detail::avx512::encode32_pow2<D>(a, c, slow));
    _mm256_store_si256(reinterpret_cast<__m256i*>(got_no_inf), detail::avx512::encode32_pow2<D, false>(a, c, slow_no_inf));
    bad += slow_no_inf != slow;
    for (std::size_t l = 0; l < 32; ++l) {
      std::uint16_t b = 0;
      std::memcpy(&b, &x[i + l], 2);
      const double y = std::fabs(static_cast<double>(detail::widen(x[i + l])) * s);
      const bool expect_slow = (b & 0x7FFF) != 0 && ((b & 0x7F80) == 0 || y < min_normal);
      const bool is_slow = ((slow >> l) & 1u) != 0;
      bad += is_slow != expect_slow || (!is_slow && got[l] != want[i + l]);
      bad += !is_slow && ((b & 0x7FFF) != 0x7F80 || j >= detail::avx2::pow2_inf_saturates_from) && got_no_inf[l] != got[l];
    }
  }
  return bad;
}

/// The AVX2 form (16 lanes per vector), the same checks: encode16_pow2 lane by lane (its report is a
/// mask per lane, all ones or zero), and encode32_pow2 packs the same codes in order. The form without
/// the inf test, as above.
template <fp8_dtype D>
TEQUANT_TARGET_AVX2 std::size_t pow2_mismatches_avx2(const std::vector<bf16>& x, int j) {
  const float s = std::ldexp(1.0f, j);
  const double min_normal = std::ldexp(1.0, 1 - detail::fp8_traits<D>::bias);
  std::vector<std::uint8_t> want(x.size());
  detail::scale_encode_scalar<D>(x.data(), x.size(), s, want.data(), false);
  const detail::avx2::pow2_words c = detail::avx2::pow2_words_of<D>(s);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); i += 32) {
    alignas(32) std::uint8_t got[32];
    alignas(32) std::uint16_t slow_lanes[16];
    for (std::size_t h = 0; h < 32; h += 16) {
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.data() + i + h));
      __m256i slow = _mm256_setzero_si256(), slow_no_inf = _mm256_setzero_si256();
      const __m256i r = detail::avx2::encode16_pow2<D>(a, c, slow);
      const __m256i r_no_inf = detail::avx2::encode16_pow2<D, false>(a, c, slow_no_inf);
      alignas(32) std::uint16_t codes[16], codes_no_inf[16], slow_no_inf_lanes[16];
      _mm256_store_si256(reinterpret_cast<__m256i*>(codes), r);
      _mm256_store_si256(reinterpret_cast<__m256i*>(slow_lanes), slow);
      _mm256_store_si256(reinterpret_cast<__m256i*>(codes_no_inf), r_no_inf);
      _mm256_store_si256(reinterpret_cast<__m256i*>(slow_no_inf_lanes), slow_no_inf);
      for (std::size_t l = 0; l < 16; ++l) {
        std::uint16_t b = 0;
        std::memcpy(&b, &x[i + h + l], 2);
        const double y = std::fabs(static_cast<double>(detail::widen(x[i + h + l])) * s);
        const bool expect_slow = (b & 0x7FFF) != 0 && ((b & 0x7F80) == 0 || y < min_normal);
        const bool is_slow = slow_lanes[l] == 0xFFFF;
        bad += (slow_lanes[l] != 0 && slow_lanes[l] != 0xFFFF) || is_slow != expect_slow ||
               (!is_slow && (codes[l] > 0xFF || codes[l] != want[i + h + l]));
        bad += slow_no_inf_lanes[l] != slow_lanes[l] ||
               (!is_slow && ((b & 0x7FFF) != 0x7F80 || j >= detail::avx2::pow2_inf_saturates_from) &&
                codes_no_inf[l] != codes[l]);
        got[h + l] = static_cast<std::uint8_t>(codes[l]);
      }
    }
    __m256i slow32 = _mm256_setzero_si256();
    alignas(32) std::uint8_t packed[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(packed), detail::avx2::encode32_pow2<D>(x.data() + i, c, c, slow32));
    bad += std::memcmp(packed, got, 32) != 0;
  }
  return bad;
}

}  // namespace
#endif

TEST_CASE("bf16 times a power of two in 16-bit lanes: every pattern, every exponent [" TEQUANT_TEST_VARIANT "]") {
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (!detail::host_has_avx2()) return;  // nothing to compare on this CPU
  CHECK(detail::avx2::pow2_multiplier(0x1p-126f));
  CHECK(detail::avx2::pow2_multiplier(0x1p127f));
  CHECK(detail::avx2::pow2_multiplier(1.0f));
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const float s : {0.0f, -1.0f, 3.0f, 0x1p-127f, inf, nan}) {
    CAPTURE(s);
    CHECK_FALSE(detail::avx2::pow2_multiplier(s));
  }
  std::vector<bf16> x(65536);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = from_bits(static_cast<std::uint16_t>(i));
  const bool avx512 = detail::host_has_avx512();
  MESSAGE("16-bit-lane encoders checked: " << std::string(avx512 ? "AVX2 and AVX-512" : "AVX2"));
  for (int j = -126; j <= 127; ++j) {
    CAPTURE(j);
    CHECK(pow2_mismatches_avx2<fp8_dtype::e4m3>(x, j) == 0);
    CHECK(pow2_mismatches_avx2<fp8_dtype::e5m2>(x, j) == 0);
    if (avx512) {
      CHECK(pow2_mismatches<fp8_dtype::e4m3>(x, j) == 0);
      CHECK(pow2_mismatches<fp8_dtype::e5m2>(x, j) == 0);
    }
  }
#endif
}

TEST_CASE("bf16 cast: the streaming path (4 Mi elements, misaligned output) [" TEQUANT_TEST_VARIANT "]") {
  std::mt19937 rng(5);
  const std::size_t n = (std::size_t{4} << 20) + 45;
  std::vector<bf16> x(n + 8);
  for (auto& v : x) v = from_bits(static_cast<std::uint16_t>(rng()));
  check_scale_encode<fp8_dtype::e4m3>(x, 1, n, 0x1p-3f, 3);
  check_scale_encode<fp8_dtype::e5m2>(x, 0, n, 1.0f, 0);
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  // Through the dispatch the output streams only past the per-core share of the last-level cache;
  // the kernels themselves at the smallest size they stream at.
  const std::size_t min = detail::streaming_store_min_bytes;
  std::vector<std::uint8_t> want(n), got(n + 3);
  const std::uint32_t want_bits = detail::scale_encode_scalar<fp8_dtype::e4m3>(x.data() + 1, n, 0x1p-3f, want.data(), true);
  if (detail::host_has_avx512()) {
    CHECK(detail::avx512::scale_encode<fp8_dtype::e4m3>(x.data() + 1, n, 0x1p-3f, got.data() + 3, true, min) == want_bits);
    CHECK(std::memcmp(got.data() + 3, want.data(), n) == 0);
  }
  if (detail::host_has_avx2()) {
    std::fill(got.begin(), got.end(), 0);
    CHECK(detail::avx2::scale_encode<fp8_dtype::e4m3>(x.data() + 1, n, 0x1p-3f, got.data() + 3, true, min) == want_bits);
    CHECK(std::memcmp(got.data() + 3, want.data(), n) == 0);
  }
  MESSAGE("per-tensor casts stream from " << detail::avx2::per_tensor_stream_min_bytes() << " bytes here");
#endif
}

namespace {

/// One element of a 32-element MXFP8 block of `kind` (exponent ex), the kinds both MXFP8 tests share:
/// 0 an inf in the block (multiplier 0), 1 NaNs, 2 signed zeros, 3 amax near the largest floats
/// (codes up to 254), 4 a NaN (negative when negative_nan) and -inf among finite values; other kinds
/// ordinary values (which the callers may change further).
float mx_block_value(unsigned kind, int ex, bool negative_nan, std::mt19937& rng) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  float v = std::ldexp(std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng), ex);
  const unsigned r = static_cast<unsigned>(rng() % 32);
  if (kind == 0 && r == 0) v = (rng() % 2) ? inf : -inf;
  if (kind == 1 && r < 3) v = nan;
  if (kind == 2) v = (r < 16) ? 0.0f : -0.0f;
  if (kind == 3) v = std::ldexp(v, 127 - ex);
  if (kind == 4 && r == 1) v = negative_nan ? -nan : nan;
  if (kind == 4 && r == 2) v = -inf;
  return v;
}

}  // namespace

TEST_CASE_TEMPLATE("MXFP8 rowwise (fp32, bf16): inf, NaN, zero and overflowing blocks, tails of blocks [" TEQUANT_TEST_VARIANT "]", T, float, bf16) {
  std::mt19937 rng(23);
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::size_t KB : {std::size_t{1}, std::size_t{8}, std::size_t{19}, std::size_t{40}}) {
    const std::size_t M = 6, K = 32 * KB;
    std::vector<T> x(M * K);
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t kb = 0; kb < KB; ++kb) {
        const unsigned kind = static_cast<unsigned>(rng() % 8);
        const int ex = static_cast<int>(rng() % 250) - 125;
        for (std::size_t t = 0; t < 32; ++t) {
          float v = mx_block_value(kind, ex, false, rng);
          if (kind == 7) v = std::ldexp(v, -static_cast<int>(rng() % 48));  // FP8 subnormals beside normals
          if constexpr (std::is_same_v<T, float>) x[m * K + kb * 32 + t] = v;
          else x[m * K + kb * 32 + t] = tequant::to_bf16(v);
        }
        if constexpr (std::is_same_v<T, float>) {
          if (kind == 5) x[m * K + kb * 32 + rng() % 32] = inf;  // inf among finite values
          if (kind == 6) x[m * K + kb * 32 + rng() % 32] = -std::numeric_limits<float>::quiet_NaN();
        } else {
          if (kind == 5) x[m * K + kb * 32 + rng() % 32] = from_bits(0x7F80);  // inf among finite values
          if (kind == 6) x[m * K + kb * 32 + rng() % 32] = from_bits(0xFFC1);  // a negative NaN
        }
      }
    for (const bool stream : {false, true})
      for (const auto d : {fp8_dtype::e4m3, fp8_dtype::e5m2}) {
        CAPTURE(KB);
        CAPTURE(stream);
        std::vector<std::uint8_t> data(M * K), scale(M * (KB + 3), 0xEE), want_data(M * K), want_scale(M * (KB + 3), 0xEE);
        tequant::detail::with_dtype(d, [&]<fp8_dtype D>() {
          detail::mxfp8_rowwise_host<D>(x.data(), M, K, data.data(), scale.data(), KB + 3, stream);
          detail::mxfp8_rowwise_scalar<D>(x.data(), M, K, want_data.data(), want_scale.data(), KB + 3);
        });
        CHECK(data == want_data);
        CHECK(scale == want_scale);
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
        // The AVX2 kernel called directly (CPUs with AVX-512 dispatch to theirs above).
        if (detail::host_has_avx2()) {
          std::vector<std::uint8_t> data2(M * K), scale2(M * (KB + 3), 0xEE);
          tequant::detail::with_dtype(d, [&]<fp8_dtype D>() {
            detail::avx2::mxfp8_rowwise<D>(x.data(), M, K, data2.data(), scale2.data(), KB + 3, stream);
          });
          CHECK(data2 == want_data);
          CHECK(scale2 == want_scale);
        }
#endif
      }
  }
}

namespace {

/// x [M, K] of T whose 32x1 column blocks are of random kinds: inf, NaN, signed zeros, near the largest
/// floats (codes up to 254), an inf or a negative NaN among finite values, FP8 subnormals beside
/// normals, or ordinary values. finite: no block with an inf or code 254 (the kernels' fast path for
/// whole chunks).
template <class T>
std::vector<T> column_block_matrix(std::size_t M, std::size_t K, std::mt19937& rng, bool finite = false) {
  std::vector<T> x(M * K);
  const auto put = [&](std::size_t i, float v) {
    if constexpr (std::is_same_v<T, float>) x[i] = v;
    else x[i] = tequant::to_bf16(v);
  };
  for (std::size_t mb = 0; mb < M / 32; ++mb)
    for (std::size_t k = 0; k < K; ++k) {
      static constexpr unsigned finite_kinds[] = {1, 2, 5, 6, 7, 8};
      const unsigned kind = finite ? finite_kinds[rng() % 6] : static_cast<unsigned>(rng() % 10);
      const int ex = static_cast<int>(rng() % 250) - 125;
      for (std::size_t t = 0; t < 32; ++t) {
        float v = mx_block_value(kind, ex, true, rng);
        if (kind == 5) v = std::ldexp(v, -140 - ex);  // subnormal floats
        if (kind == 7) v = std::ldexp(v, -static_cast<int>(rng() % 48));
        put((mb * 32 + t) * K + k, v);
      }
    }
  return x;
}

/// The columnwise kernel `run` (x, M, K, data, scale, scale_cols, stream) against the portable loops, the
/// output misaligned by out_off bytes, padded scale rows, a guard byte after the data.
template <fp8_dtype D, class T, class Run>
void check_columnwise(const std::vector<T>& x, std::size_t M, std::size_t K, std::size_t out_off, bool stream, Run run) {
  const std::size_t scale_cols = K + 64;
  std::vector<std::uint8_t> buf(M * K + 64 + 1, 0xAB), scale((M / 32) * scale_cols, 0xEE), want(M * K);
  std::vector<std::uint8_t> want_scale(scale.size(), 0xEE);
  std::uint8_t* out = buf.data() + (64 - reinterpret_cast<std::uintptr_t>(buf.data()) % 64) % 64 + out_off;
  run(x.data(), M, K, out, scale.data(), scale_cols, stream);
  detail::mxfp8_columnwise_scalar<D>(x.data(), M, K, want.data(), want_scale.data(), scale_cols);
  CHECK(std::memcmp(out, want.data(), M * K) == 0);
  CHECK(scale == want_scale);
  CHECK(out[M * K] == 0xAB);
}

template <class T>
void check_columnwise_kernels() {
  std::mt19937 rng(31);
  // K: one chunk's tail of 32 columns (fp32 casts 64 at a time), more than one chunk (4096 columns),
  // a narrow last chunk; M: one and several 32-row blocks (the next block prefetched).
  for (const std::size_t K : {std::size_t{32}, std::size_t{96}, std::size_t{4096}, std::size_t{4096 + 32}, std::size_t{8192 + 96}})
    for (const std::size_t M : {std::size_t{32}, std::size_t{96}})
      for (const bool finite : {false, true}) {
        const auto x = column_block_matrix<T>(M, K, rng, finite);
        CAPTURE(finite);
        for (const bool stream : {false, true})
          for (const std::size_t off : {std::size_t{0}, std::size_t{16}, std::size_t{5}}) {
            CAPTURE(K);
            CAPTURE(M);
            CAPTURE(stream);
            CAPTURE(off);
            tequant::detail::with_dtype(fp8_dtype::e4m3, [&]<fp8_dtype D>() {
              check_columnwise<D>(x, M, K, off, stream, [](auto... a) { detail::mxfp8_columnwise_host<D>(a...); });
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
              // Each vector kernel called directly where the CPU has it: the AVX-512 one and the AVX2 one.
              if (detail::host_has_avx512())
                check_columnwise<D>(x, M, K, off, stream, [](auto... a) { detail::avx512::mxfp8_columnwise<D>(a...); });
              if (detail::host_has_avx2())
                check_columnwise<D>(x, M, K, off, stream, [](auto... a) { detail::avx2::mxfp8_columnwise<D>(a...); });
#endif
            });
            if (K > 4096) continue;
            tequant::detail::with_dtype(fp8_dtype::e5m2, [&]<fp8_dtype D>() {
              check_columnwise<D>(x, M, K, off, stream, [](auto... a) { detail::mxfp8_columnwise_host<D>(a...); });
            });
          }
      }
}

}  // namespace

TEST_CASE("MXFP8 columnwise fp32: inf, NaN, zero, subnormal and overflowing blocks, chunks, misaligned [" TEQUANT_TEST_VARIANT "]") {
  check_columnwise_kernels<float>();
}

TEST_CASE("MXFP8 columnwise bf16: inf, NaN, zero, subnormal and overflowing blocks, chunks, misaligned [" TEQUANT_TEST_VARIANT "]") {
  check_columnwise_kernels<bf16>();
}

namespace {

/// A [M, K] matrix (at an offset of `off` elements) whose 128-wide tiles are of mixed kinds: random
/// magnitudes over the whole exponent range, inf, NaN (both signs), zero, tiny (scale overflows to
/// value_for_inf), and values near the largest floats.
template <class T>
std::vector<T> block_matrix(std::mt19937& rng, std::size_t M, std::size_t K, std::size_t off) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<T> x(off + M * K);
  const std::size_t KB = (K + 127) / 128, MB = (M + 127) / 128;
  std::vector<unsigned> kind2d(MB * KB), kind1d(M * KB);
  for (auto& k : kind2d) k = static_cast<unsigned>(rng() % 10);
  for (auto& k : kind1d) k = static_cast<unsigned>(rng() % 10);
  for (std::size_t m = 0; m < M; ++m)
    for (std::size_t k = 0; k < K; ++k) {
      // Half of the 128x128 tiles are of one kind throughout (the 128x128 kernel sees every kind), the
      // others of one kind per row (each 1x128 tile sees every kind).
      const std::size_t mb = m / 128, kb = k / 128;
      const unsigned kd = (mb + kb) % 2 == 0 ? kind2d[mb * KB + kb] : kind1d[m * KB + kb];
      const int ex = static_cast<int>(rng() % 250) - 125;
      float v = std::ldexp(std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng), ex);
      const unsigned r = static_cast<unsigned>(rng() % 256);
      if (kd == 0 && r == 0) v = (rng() % 2) ? inf : -inf;
      if (kd == 1 && r < 3) v = (rng() % 2) ? nan : -nan;
      if (kd == 2) v = (r < 128) ? 0.0f : -0.0f;
      if (kd == 3) v = std::ldexp(std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng), 126);
      if (kd == 4) v = r < 8 ? 0.0f : std::ldexp(v, -140 - ex);  // tiny: fp8_max / amax overflows (0 * inf: NaN)
      if (kd == 5) v = std::ldexp(v, -ex);       // magnitudes around 1
      if (kd == 6) v = std::ldexp(v, -ex - static_cast<int>(r % 24));  // around 1 and down to FP8 subnormals
      if constexpr (std::is_same_v<T, float>) x[off + m * K + k] = v;
      else x[off + m * K + k] = tequant::to_bf16(v);
    }
  return x;
}

template <class T>
void check_block_kernels(std::size_t M, std::size_t K, std::size_t xoff, std::size_t doff, std::mt19937& rng) {
  const std::vector<T> x = block_matrix<T>(rng, M, K, xoff);
  const std::size_t KB = (K + 127) / 128, MB = (M + 127) / 128;
  const float inf = std::numeric_limits<float>::infinity();
  // (pow2, eps, value_for_inf): inf and 0 scales (value_for_inf inf or 0, on the tiny tiles) take the AVX2 encoder.
  const struct { bool pow2; float eps, vinf; } params[] = {{false, 0.0f, std::numeric_limits<float>::max()},
                                                           {true, 0.0f, 1.0f},
                                                           {false, 1e-3f, 1.0f},
                                                           {false, 0.0f, inf},
                                                           {true, 0.0f, 0.0f},
                                                           {false, inf, 1.0f},
                                                           {true, 0x1p-100f, 0x1p100f}};
  for (const auto& p : params)
    for (const bool stream : {false, true})
      for (const auto d : {fp8_dtype::e4m3, fp8_dtype::e5m2}) {
        CAPTURE(M);
        CAPTURE(K);
        CAPTURE(xoff);
        CAPTURE(doff);
        CAPTURE(p.eps);
        CAPTURE(p.vinf);
        CAPTURE(stream);
        std::vector<std::uint8_t> data(doff + M * K + 1, 0xAB), want(M * K + 1, 0);
        std::vector<float> si(KB * (M + 2), -7.0f), want_si(KB * (M + 2), -7.0f);
        std::vector<std::uint8_t> data2(doff + M * K + 1, 0xAB), want2(M * K + 1, 0);
        std::vector<float> s2(MB * KB, -7.0f), want_s2(MB * KB, -7.0f);
        tequant::detail::with_dtype(d, [&]<fp8_dtype D>() {
          detail::block_rowwise_host<D>(x.data() + xoff, M, K, data.data() + doff, si.data(), M + 2, p.pow2, p.eps, p.vinf, stream);
          detail::block_rowwise_scalar<D>(x.data() + xoff, M, K, want.data(), want_si.data(), M + 2, p.pow2, p.eps, p.vinf);
          detail::block_2d_host<D>(x.data() + xoff, M, K, data2.data() + doff, s2.data(), p.pow2, p.eps, p.vinf, stream);
          detail::block_2d_scalar<D>(x.data() + xoff, M, K, want2.data(), want_s2.data(), p.pow2, p.eps, p.vinf);
        });
        const auto check_outputs = [&] {
          CHECK(std::memcmp(data.data() + doff, want.data(), M * K) == 0);
          CHECK(data[doff + M * K] == 0xAB);
          CHECK(std::memcmp(si.data(), want_si.data(), si.size() * sizeof(float)) == 0);
          CHECK(std::memcmp(data2.data() + doff, want2.data(), M * K) == 0);
          CHECK(data2[doff + M * K] == 0xAB);
          CHECK(std::memcmp(s2.data(), want_s2.data(), s2.size() * sizeof(float)) == 0);
        };
        check_outputs();
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
        // The AVX2 kernels called directly (CPUs with AVX-512 dispatch to theirs above).
        if (detail::host_has_avx2()) {
          std::fill(data.begin(), data.end(), std::uint8_t{0xAB});
          std::fill(data2.begin(), data2.end(), std::uint8_t{0xAB});
          std::fill(si.begin(), si.end(), -7.0f);
          std::fill(s2.begin(), s2.end(), -7.0f);
          tequant::detail::with_dtype(d, [&]<fp8_dtype D>() {
            detail::avx2::block_rowwise<D>(x.data() + xoff, M, K, data.data() + doff, si.data(), M + 2, p.pow2, p.eps, p.vinf, stream);
            detail::avx2::block_2d<D>(x.data() + xoff, M, K, data2.data() + doff, s2.data(), p.pow2, p.eps, p.vinf, stream);
          });
          check_outputs();
        }
#endif
      }
}

}  // namespace

TEST_CASE("FP8 block scaling 1x128 and 128x128, fp32 and bf16: special tiles, tails, misaligned [" TEQUANT_TEST_VARIANT "]") {
  std::mt19937 rng(31);
  // K: one tile, one group of eight, groups plus full and partial tiles; M: partial row blocks.
  const std::size_t shapes[][2] = {{1, 128}, {3, 1024}, {130, 1024 + 128 + 37}, {257, 2048 + 5}, {129, 100}, {5, 3 * 1024 + 256}};
  for (const auto& s : shapes) {
    check_block_kernels<float>(s[0], s[1], 0, 0, rng);
    check_block_kernels<bf16>(s[0], s[1], 0, 0, rng);
  }
  // The 128x128 kernels (AVX-512 and AVX2) pipeline their passes in segments of 2 KiB of input (512 fp32, 1024 bf16
  // columns): K a multiple of both with M a partial block, a last segment of one full tile, and K past
  // the kernel's column chunk (16384: the row stride is then not the width of a call).
  const std::size_t segment_shapes[][2] = {{260, 2048}, {200, 512 + 128}, {129, 16384 + 640}};
  for (const auto& s : segment_shapes) {
    check_block_kernels<float>(s[0], s[1], 0, 0, rng);
    check_block_kernels<bf16>(s[0], s[1], 0, 0, rng);
  }
  check_block_kernels<float>(131, 2048 + 160, 1, 3, rng);  // misaligned input and output (no streaming)
  check_block_kernels<bf16>(131, 2048 + 160, 1, 16, rng);  // misaligned input; output 16-byte aligned, K % 16 == 0 (streams)
}

