// SPDX-License-Identifier: Apache-2.0
// Host NVFP4 quantize/dequantize against an independent reference of TE's rule, stochastic rounding,
// and the Philox4x32-10 generator behind it.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/nvfp4_compare.hpp"
#include "backend/nvfp4_reference.hpp"
#include "backend/random_tensor.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/detail/philox.hpp"
#include "tequant/detail/philox_x8.hpp"
#include "tequant/format/e2m1.hpp"
#include "tequant/format/nvfp4.hpp"
#include "tequant/quantized_tensor.hpp"

namespace {

using tq_test::random_tensor;

using tequant::cast_plan;
using tequant::host_backend;
using tequant::matrix_view;
using tequant::quantized_tensor;
using tequant::scaling_mode;

cast_plan nvfp4_plan(bool tile_2d) {
  cast_plan p{nullptr, nullptr, tequant::fp8_dtype::e4m3, scaling_mode::nvfp4};
  p.tile_2d = tile_2d;
  return p;
}


/// Quantizes x (as T) with the host backend and compares both directions with the reference.
template <class T>
void check_against_reference(const std::vector<float>& x_f, std::size_t M, std::size_t K, bool tile_2d) {
  std::vector<T> x(x_f.size());
  std::vector<float> widened(x_f.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) x[i] = x_f[i];
    else x[i] = tequant::to_bf16(x_f[i]);
    widened[i] = tequant::detail::widen(x[i]);
  }
  host_backend be;
  const cast_plan plan = nvfp4_plan(tile_2d);
  quantized_tensor<host_backend> q;
  q.prepare(be, plan, M, K);
  be.quantize(matrix_view<const T>{x.data(), M, K}, plan, q.output());
  const tequant::quantized_output o = q.output();
  for (int d = 0; d < 2; ++d) {
    const bool col = d == 1;
    const auto ref = nvfp4_reference::cast(widened, M, K, col, tile_2d);
    CHECK((col ? o.columnwise_scale_inv : o.rowwise_scale_inv)[0] == ref.global_decode);
    const tq_test::nvfp4_mismatches bad = tq_test::count_nvfp4_mismatches(o, ref, col, M, K);
    INFO("M=" << M << " K=" << K << " columnwise=" << col << " tile_2d=" << tile_2d);
    CHECK(bad.codes == 0);
    CHECK(bad.scales == 0);
    CHECK(bad.padding == 0);
    // Dequantize: code * block scale * global decode scale.
    std::vector<float> out(M * K);
    be.dequantize(plan, M, K, o, col, out);
    std::size_t bad_values = 0;
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k = 0; k < K; ++k) {
        const std::size_t line = col ? k : m, i = col ? m : k;
        const float want = nvfp4_reference::e2m1_value(ref.codes[line * (col ? M : K) + i]) *
                           static_cast<float>(nvfp4_reference::e4m3_value(ref.scales[line * ref.blocks + i / 16])) *
                           ref.global_decode;
        bad_values += !(out[m * K + k] == want || (std::isnan(want) && std::isnan(out[m * K + k])));
      }
    CHECK(bad_values == 0);
  }
}

}  // namespace

TEST_CASE("nvfp4: host casts match the reference of TE's rule byte for byte (fp32, bf16, 1D and 2D, partial blocks)") {
  const std::size_t shapes[][2] = {{32, 64}, {16, 16}, {2, 2}, {18, 40}, {130, 34}, {48, 150}, {64, 256}};
  unsigned seed = 1;
  for (const auto& s : shapes)
    for (const bool specials : {false, true})
      for (const bool tile_2d : {false, true}) {
        const auto x = random_tensor(s[0] * s[1], seed++, specials);
        check_against_reference<float>(x, s[0], s[1], tile_2d);
        check_against_reference<tequant::bf16>(x, s[0], s[1], tile_2d);
      }
}

TEST_CASE("nvfp4: all-zero, all-NaN, infinite and tiny tensors follow TE's global-scale rule") {
  const std::size_t M = 16, K = 32;
  std::vector<float> zeros(M * K, 0.0f);
  check_against_reference<float>(zeros, M, K, false);
  std::vector<float> nans(M * K, std::numeric_limits<float>::quiet_NaN());
  check_against_reference<float>(nans, M, K, false);
  auto inf = random_tensor(M * K, 99, false);
  inf[5] = -std::numeric_limits<float>::infinity();
  check_against_reference<float>(inf, M, K, true);
  std::vector<float> tiny(M * K, 1e-40f);  // amax denormal: S_enc capped at FLT_MAX
  tiny[3] = -3e-39f;
  check_against_reference<float>(tiny, M, K, false);
  CHECK(tequant::nvfp4_global_encode_scale(0.0f) == 1.0f);
  CHECK(tequant::nvfp4_global_encode_scale(std::numeric_limits<float>::infinity()) == 1.0f);
  CHECK(tequant::nvfp4_global_encode_scale(1e-45f) == std::numeric_limits<float>::max());
  CHECK(tequant::nvfp4_global_encode_scale(2688.0f) == 1.0f);
}

TEST_CASE("nvfp4: the vectorised rowwise path equals the portable loop") {
  for (const std::size_t K : {16u, 32u, 48u, 40u, 128u, 256u, 406u}) {
    const auto x = random_tensor(K, static_cast<unsigned>(K), true);
    const float s_enc = tequant::nvfp4_global_encode_scale(3.0f), s_dec = 1.0f / s_enc;
    std::vector<std::uint8_t> d0(K / 2), d1(K / 2), s0((K + 15) / 16), s1((K + 15) / 16);
    tequant::detail::nvfp4_row_rn_scalar(x.data(), K, s_enc, s_dec, d0.data(), s0.data());
    tequant::detail::nvfp4_row_rn_host(x.data(), K, s_enc, s_dec, d1.data(), s1.data());
    CHECK(d0 == d1);
    CHECK(s0 == s1);
  }
}

TEST_CASE("nvfp4: bad shapes and sizes are tequant errors") {
  host_backend be;
  std::vector<float> x(3 * 16, 1.0f);
  const cast_plan plan = nvfp4_plan(false);
  quantized_tensor<host_backend> q;
  q.prepare(be, plan, 3, 16);
  CHECK_THROWS_WITH_AS(be.quantize(matrix_view<const float>{x.data(), 3, 16}, plan, q.output()),
                       doctest::Contains("rows and cols must be even"), tequant::error);
  quantized_tensor<host_backend> q2;
  q2.prepare(be, plan, 2, 16);
  auto o = q2.output();
  o.rowwise_block_scale = o.rowwise_block_scale.first(3);
  CHECK_THROWS_WITH_AS(be.quantize(matrix_view<const float>{x.data(), 2, 16}, plan, o),
                       doctest::Contains("rowwise_scale has 3 elements"), tequant::error);
}

TEST_CASE("philox4x32-10: Random123's known-answer vectors") {
  using tequant::detail::philox4x32_10;
  using C = tequant::detail::philox_counter;
  CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == C{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u});
  CHECK(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu}) ==
        C{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu});
  CHECK(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u}) ==
        C{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u});
}

TEST_CASE("nvfp4 stochastic rounding: unbiased, reproducible from (seed, offset), offset advances") {
  host_backend be;
  const std::size_t M = 64, K = 256, n = M * K;
  // Every element is the same value, between two E2M1 neighbours after scaling: the block amax sets the
  // scale, so one 6.0-ish element per block pins it and the rest sit in between.
  std::vector<float> x(n, 0.7f);
  for (std::size_t i = 0; i < n; i += 16) x[i] = 6.0f;
  std::uint64_t offset = 0;
  cast_plan plan = nvfp4_plan(false);
  plan.rng_offset = &offset;
  plan.rng_seed = 1234;
  quantized_tensor<host_backend> q, q2;
  q.prepare(be, plan, M, K);
  q2.prepare(be, plan, M, K);
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, q.output());
  CHECK(offset == 2 * ((n + 3) / 4));  // both directions drew one word per element
  std::vector<float> out(n);
  be.dequantize(plan, M, K, q.output(), false, out);
  double sum = 0.0, count = 0.0, rn_sum = 0.0;
  std::vector<float> rn_out(n);
  {
    quantized_tensor<host_backend> r;
    const cast_plan rn = nvfp4_plan(false);
    r.prepare(be, rn, M, K);
    be.quantize(matrix_view<const float>{x.data(), M, K}, rn, r.output());
    be.dequantize(rn, M, K, r.output(), false, rn_out);
  }
  for (std::size_t i = 0; i < n; ++i)
    if (i % 16 != 0) {
      sum += out[i];
      rn_sum += rn_out[i];
      count += 1.0;
    }
  const double mean = sum / count, rn_mean = rn_sum / count;
  INFO("SR mean " << mean << ", RN mean " << rn_mean);
  CHECK(std::fabs(mean - 0.7) < 0.01);    // converges to the input
  CHECK(std::fabs(rn_mean - 0.7) > 0.02);  // where round-to-nearest is biased
  // Same (seed, offset): same bits; the next offset: different bits.
  std::uint64_t again = 0;
  plan.rng_offset = &again;
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, q2.output());
  CHECK(std::equal(q.output().rowwise_data.begin(), q.output().rowwise_data.end(), q2.output().rowwise_data.begin()));
  CHECK(std::equal(q.output().columnwise_data.begin(), q.output().columnwise_data.end(), q2.output().columnwise_data.begin()));
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, q2.output());
  CHECK_FALSE(std::equal(q.output().rowwise_data.begin(), q.output().rowwise_data.end(), q2.output().rowwise_data.begin()));
  plan.rng_seed = 1235;
  again = 0;
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, q2.output());
  CHECK_FALSE(std::equal(q.output().rowwise_data.begin(), q.output().rowwise_data.end(), q2.output().rowwise_data.begin()));
}

TEST_CASE("nvfp4 stochastic rounding: a columnwise-only cast moves the offset past every word it drew") {
  // The columnwise stream is numbered after the rowwise one's place; a cast of the columnwise copy
  // alone draws from there, so the next cast (rowwise, say) must start after it, not reuse its words.
  host_backend be;
  const std::size_t M = 32, K = 64, n = M * K, groups = (n + 3) / 4;
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) x[i] = 0.1f + 0.37f * static_cast<float>(i % 23);
  cast_plan plan = nvfp4_plan(false);
  plan.rng_seed = 99;
  std::uint64_t offset = 0;
  plan.rng_offset = &offset;
  quantized_tensor<host_backend> col_only, row_only;
  col_only.prepare(be, plan, M, K, false, true);
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, col_only.output());
  CHECK(offset == 2 * groups);
  row_only.prepare(be, plan, M, K, true, false);
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, row_only.output());
  CHECK(offset == 3 * groups);
  // The rowwise cast drew [2g, 3g): what a cast of both directions from offset 2g writes rowwise.
  std::uint64_t both_offset = 2 * groups;
  plan.rng_offset = &both_offset;
  quantized_tensor<host_backend> both;
  both.prepare(be, plan, M, K);
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, both.output());
  CHECK(std::equal(row_only.output().rowwise_data.begin(), row_only.output().rowwise_data.end(),
                   both.output().rowwise_data.begin()));
}

TEST_CASE("philox4x32-10, eight lanes: Random123's known answers, and every lane equals the scalar generator") {
  using tequant::detail::philox4x32_10;
  using tequant::detail::philox_counter;
  using tequant::detail::philox_lanes8;
  // The known-answer vectors in lanes 0-2, each with its own key.
  philox_lanes8 ctr{};
  std::uint32_t k0[8]{}, k1[8]{};
  const philox_counter in[3] = {{0, 0, 0, 0},
                                {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                                {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
  const std::uint32_t keys[3][2] = {{0, 0}, {0xffffffffu, 0xffffffffu}, {0xa4093822u, 0x299f31d0u}};
  const philox_counter want[3] = {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u},
                                  {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu},
                                  {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) ctr.w[j][i] = in[i][static_cast<std::size_t>(j)];
    k0[i] = keys[i][0];
    k1[i] = keys[i][1];
  }
  const philox_lanes8 kat = tequant::detail::philox4x32_10_x8(ctr, k0, k1);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) CHECK(kat.w[j][i] == want[i][static_cast<std::size_t>(j)]);

  // Random counters and keys in every lane: the dispatched version (AVX2 where the CPU has it), the AVX2
  // version called directly, the portable loop and philox4x32_10 lane by lane agree.
  std::mt19937 g(2024);
  int mismatches = 0;
  for (int batch = 0; batch < 20000; ++batch) {
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 4; ++j) ctr.w[j][i] = g();
      k0[i] = g();
      k1[i] = g();
    }
    const philox_lanes8 a = tequant::detail::philox4x32_10_x8(ctr, k0, k1);
    const philox_lanes8 b = tequant::detail::philox4x32_10_x8_scalar(ctr, k0, k1);
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
    const philox_lanes8 v = tequant::detail::host_has_avx2() ? tequant::detail::avx2::philox4x32_10_x8(ctr, k0, k1) : b;
#else
    const philox_lanes8 v = b;
#endif
    for (int i = 0; i < 8; ++i) {
      const philox_counter r = philox4x32_10({ctr.w[0][i], ctr.w[1][i], ctr.w[2][i], ctr.w[3][i]}, {k0[i], k1[i]});
      for (int j = 0; j < 4; ++j) {
        const std::uint32_t w = r[static_cast<std::size_t>(j)];
        mismatches += a.w[j][i] != w || b.w[j][i] != w || v.w[j][i] != w;
      }
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("philox_groups8: eight consecutive groups of a stream, the 64-bit counter carrying across words") {
  const std::uint64_t seeds[] = {0, 1234, 0x5EEDF4F400000001ull, ~std::uint64_t{0}};
  const std::uint64_t offsets[] = {0, 5, (std::uint64_t{1} << 32) - 3, (std::uint64_t{1} << 40) * 3,
                                   ~std::uint64_t{0} - 4};
  for (const std::uint64_t seed : seeds)
    for (const std::uint64_t offset : offsets)
      for (const std::uint64_t g : {std::uint64_t{0}, std::uint64_t{7}, std::uint64_t{1} << 33}) {
        const auto lanes = tequant::detail::philox_groups8(seed, offset, g);
        for (std::uint64_t i = 0; i < 8; ++i) {
          const auto want = tequant::detail::philox_group(seed, offset, g + i);
          for (std::size_t j = 0; j < 4; ++j) CHECK(lanes.w[j][i] == want[j]);
        }
      }
}

TEST_CASE("nvfp4 stochastic rounding: every code is the one the scalar generator's word for its element gives") {
  // Shapes whose rows and columns end inside a group of four and inside a batch of eight groups; a
  // stream offset just below 2^32 groups, so the counter carries into its second word mid-tensor.
  const std::size_t shapes[][2] = {{18, 40}, {2, 2}, {34, 150}};
  unsigned seed = 7;
  for (const auto& s : shapes)
    for (const bool tile_2d : {false, true}) {
      const std::size_t M = s[0], K = s[1], n = M * K;
      CAPTURE(M);
      CAPTURE(K);
      CAPTURE(tile_2d);
      const auto x = random_tensor(n, seed++, false);
      const std::uint64_t first = (std::uint64_t{1} << 32) - n / 8;
      std::uint64_t offset = first;
      cast_plan plan = nvfp4_plan(tile_2d);
      plan.rng_offset = &offset;
      plan.rng_seed = 0xFEEDu + seed;
      host_backend be;
      quantized_tensor<host_backend> q;
      q.prepare(be, plan, M, K);
      be.quantize(matrix_view<const float>{x.data(), M, K}, plan, q.output());
      const auto o = q.output();
      const std::size_t rs = tequant::nvfp4_rowwise_scale_shape(M, K).cols;
      const std::size_t cs = tequant::nvfp4_columnwise_scale_shape(M, K).cols;
      const std::uint64_t col_first = first + (n + 3) / 4;  // the columnwise stream follows the rowwise one
      int bad = 0;
      for (std::size_t m = 0; m < M; ++m)
        for (std::size_t k = 0; k < K; ++k) {
          const std::size_t er = m * K + k, ec = k * M + m;
          const float row_mult =
              tequant::nvfp4_block_multiplier(o.rowwise_block_scale[m * rs + k / 16], o.rowwise_scale_inv[0]);
          const float col_mult =
              tequant::nvfp4_block_multiplier(o.columnwise_block_scale[k * cs + m / 16], o.columnwise_scale_inv[0]);
          const std::uint32_t row_word = tequant::detail::philox_group(plan.rng_seed, first, er / 4)[er % 4];
          const std::uint32_t col_word = tequant::detail::philox_group(plan.rng_seed, col_first, ec / 4)[ec % 4];
          bad += tequant::detail::get_nibble(o.rowwise_data.data(), er) !=
                 tequant::encode_e2m1_stochastic(x[er] * row_mult, row_word);
          bad += tequant::detail::get_nibble(o.columnwise_data.data(), ec) !=
                 tequant::encode_e2m1_stochastic(x[er] * col_mult, col_word);
        }
      CHECK(bad == 0);
      CHECK(offset == first + 2 * ((n + 3) / 4));
    }
}

TEST_CASE("nvfp4_host_random: any access order returns the scalar generator's word for the element") {
  tequant::detail::nvfp4_host_random rnd(99, 1000);
  std::mt19937 g(5);
  std::uniform_int_distribution<std::uint64_t> jump(0, 200);
  std::uint64_t e = 0;
  int bad = 0;
  for (int i = 0; i < 5000; ++i) {
    e = i % 3 == 0 ? jump(g) : e + 1;  // sequential runs, and jumps back and forth
    bad += rnd(e) != tequant::detail::philox_group(99, 1000, e / 4)[e % 4];
  }
  CHECK(bad == 0);
}

TEST_CASE("nvfp4 stochastic rounding: the vectorised rowwise path equals the portable loop (fp32, bf16)") {
  std::mt19937 g(77);
  for (const std::size_t K : {2u, 16u, 32u, 40u, 128u, 256u, 406u}) {
    CAPTURE(K);
    const auto x = random_tensor(K, static_cast<unsigned>(K) + 3, true);  // NaN, inf, zeros, outliers
    std::vector<tequant::bf16> xb(K);
    for (std::size_t i = 0; i < K; ++i) xb[i] = tequant::to_bf16(x[i]);
    std::vector<std::uint32_t> words(K);
    for (auto& w : words) w = g();
    for (const float amax : {3.0f, 1e4f}) {
      const float s_enc = tequant::nvfp4_global_encode_scale(amax), s_dec = 1.0f / s_enc;
      std::vector<std::uint8_t> d0(K / 2), d1(K / 2), s0((K + 15) / 16), s1((K + 15) / 16);
      tequant::detail::nvfp4_row_sr_scalar(x.data(), K, s_enc, s_dec, words.data(), d0.data(), s0.data());
      tequant::detail::nvfp4_row_sr_host(x.data(), K, s_enc, s_dec, words.data(), d1.data(), s1.data());
      CHECK(d0 == d1);
      CHECK(s0 == s1);
      tequant::detail::nvfp4_row_sr_scalar(xb.data(), K, s_enc, s_dec, words.data(), d0.data(), s0.data());
      tequant::detail::nvfp4_row_sr_host(xb.data(), K, s_enc, s_dec, words.data(), d1.data(), s1.data());
      CHECK(d0 == d1);
      CHECK(s0 == s1);
    }
  }
}

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
namespace {
/// The AVX2 stochastic encoder on eight values (a function of its own: it needs the AVX2 target).
TEQUANT_TARGET_AVX2 void avx2_sr_codes8(const float* v, const std::uint32_t* words, std::int32_t* codes) {
  const __m256i c = tequant::detail::avx2::encode_e2m1_sr8(
      _mm256_loadu_ps(v), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(words)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(codes), c);
}
}  // namespace
#endif

TEST_CASE("nvfp4 stochastic rounding: the AVX2 encoder equals encode_e2m1_stochastic at every code boundary") {
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (!tequant::detail::host_has_avx2()) return;
  // Magnitudes on, just below and just above each E2M1 value and midpoint, both signs, zeros, NaN and
  // inf, with words at the extremes and in between: the vector compares and division against the scalar.
  std::vector<float> v{0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity(), 1e-40f};
  for (const float e : {0.25f, 0.5f, 0.75f, 1.0f, 1.25f, 1.5f, 1.75f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f, 6.0f, 7.0f})
    for (const float f : {std::nextafter(e, 0.0f), e, std::nextafter(e, 100.0f)}) {
      v.push_back(f);
      v.push_back(-f);
    }
  while (v.size() % 8 != 0) v.push_back(0.3f);
  std::mt19937 g(3);
  int bad = 0;
  for (int trial = 0; trial < 64; ++trial) {
    std::vector<std::uint32_t> words(v.size());
    for (auto& w : words) w = trial < 4 ? std::array<std::uint32_t, 4>{0u, 0xFFu, 0x80000000u, 0xFFFFFFFFu}[trial] : g();
    for (std::size_t i = 0; i < v.size(); i += 8) {
      std::int32_t codes[8];
      avx2_sr_codes8(v.data() + i, words.data() + i, codes);
      for (std::size_t j = 0; j < 8; ++j)
        bad += codes[j] != tequant::encode_e2m1_stochastic(v[i + j], words[i + j]);
    }
  }
  CHECK(bad == 0);
#endif
}
