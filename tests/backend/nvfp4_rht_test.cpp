// SPDX-License-Identifier: Apache-2.0
// TE's 16x16 random Hadamard transform (format/hadamard.hpp) and the host NVFP4 cast whose columnwise
// copy goes through it, against the independent reference of nvfp4_reference.hpp.
#include <doctest/doctest.h>

#include <algorithm>
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
#include "tequant/format/hadamard.hpp"
#include "tequant/quantized_tensor.hpp"

namespace {

using tq_test::random_tensor;

using tequant::cast_plan;
using tequant::host_backend;
using tequant::matrix_view;
using tequant::quantized_tensor;

constexpr float nan_f = std::numeric_limits<float>::quiet_NaN();
constexpr float inf_f = std::numeric_limits<float>::infinity();

cast_plan rht_plan() {
  cast_plan p{nullptr, nullptr, tequant::fp8_dtype::e4m3, tequant::scaling_mode::nvfp4};
  p.columnwise_rht = true;
  return p;
}


/// The library's transform of one group (16 values) into y.
void transform(const float* x, float* y, bool bf16_rounded) {
  for (std::uint32_t c = 0; c < 16; ++c)
    y[c] = bf16_rounded ? tequant::hadamard_column(x, c) : tequant::hadamard_column_fp32(x, c);
}
void inverse(const float* y, float* x) {
  for (std::uint32_t r = 0; r < 16; ++r) x[r] = tequant::hadamard_inverse_row(y, r);
}

/// Quantizes x (as T) with RHT on and checks both directions and the dequantized values against the
/// reference: rowwise as without the transform, columnwise from the transform.
template <class T>
void check_against_reference(const std::vector<float>& x_f, std::size_t M, std::size_t K) {
  std::vector<T> x(x_f.size());
  std::vector<float> widened(x_f.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if constexpr (std::is_same_v<T, float>) x[i] = x_f[i];
    else if constexpr (std::is_same_v<T, tequant::fp16>) x[i] = tequant::to_fp16(x_f[i]);
    else x[i] = tequant::to_bf16(x_f[i]);
    widened[i] = tequant::detail::widen(x[i]);
  }
  host_backend be;
  const cast_plan plan = rht_plan();
  quantized_tensor<host_backend> q;
  q.prepare(be, plan, M, K);
  be.quantize(matrix_view<const T>{x.data(), M, K}, plan, q.output());
  const tequant::quantized_output o = q.output();
  for (const bool col : {false, true}) {
    const auto ref = nvfp4_reference::cast(widened, M, K, col, false, /*rht=*/true);
    INFO("M=" << M << " K=" << K << " columnwise=" << col << " input bytes=" << sizeof(T));
    CHECK((col ? o.columnwise_scale_inv : o.rowwise_scale_inv)[0] == ref.global_decode);
    const tq_test::nvfp4_mismatches bad = tq_test::count_nvfp4_mismatches(o, ref, col, M, K);
    CHECK(bad.codes == 0);
    CHECK(bad.scales == 0);
    CHECK(bad.padding == 0);
    // Dequantize: code * scale * global decode scale, then (columnwise) the inverse transform, M^T.
    std::vector<float> want(M * K);
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k = 0; k < K; ++k) {
        const std::size_t line = col ? k : m, i = col ? m : k;
        const std::uint8_t sc = ref.scales[line * ref.blocks + i / 16];
        const float sv = sc == 0x7F ? nan_f : static_cast<float>(nvfp4_reference::e4m3_value(sc));
        want[m * K + k] = nvfp4_reference::e2m1_value(ref.codes[line * (col ? M : K) + i]) * sv * ref.global_decode;
      }
    // Columnwise: x_r = sum_c y_c M[r][c] in double; the library's fp32 sums may differ by rounding
    // relative to the group's largest value (cancellation makes a relative-to-value bound useless).
    std::vector<float> tolerance(M * K, 0.0f);
    if (col) {
      const std::vector<float> mat = nvfp4_reference::rht_matrix();
      const std::vector<float> y(want);
      for (std::size_t k = 0; k < K; ++k)
        for (std::size_t g = 0; g < M; g += 16) {
          float group_max = 0.0f;
          for (std::size_t c = 0; c < 16; ++c) group_max = std::max(group_max, std::fabs(y[(g + c) * K + k]));
          for (std::size_t r = 0; r < 16; ++r) {
            double acc = 0.0;
            for (std::size_t c = 0; c < 16; ++c) acc += static_cast<double>(y[(g + c) * K + k]) * mat[r * 16 + c];
            want[(g + r) * K + k] = static_cast<float>(acc);
            // 16 fp32 additions of terms up to group_max / 4 whose partial sums reach 4 * group_max: each
            // rounds by at most half an ulp of 4 * group_max (how the compiler orders them is its own).
            tolerance[(g + r) * K + k] = 16 * 0x1p-24f * 4 * group_max + 1e-44f;
          }
        }
    }
    std::vector<float> out(M * K);
    be.dequantize(plan, M, K, o, col, out);
    std::size_t bad_values = 0, first_bad = M * K;
    for (std::size_t i = 0; i < M * K; ++i) {
      const float w = want[i], g = out[i];
      bool bad;
      if (std::isnan(w) || std::isnan(g)) bad = std::isnan(w) != std::isnan(g);
      else if (std::isinf(w) || std::isinf(g)) bad = w != g;
      else bad = std::fabs(w - g) > tolerance[i];  // rowwise: exact
      if (bad && first_bad == M * K) first_bad = i;
      bad_values += bad;
    }
    const std::size_t shown = first_bad < M * K ? first_bad : 0;
    INFO("first bad value at " << first_bad << ": want " << want[shown] << ", got " << out[shown] << ", tolerance "
                               << tolerance[shown]);
    CHECK(bad_values == 0);
  }
}

}  // namespace

TEST_CASE("hadamard: TE's matrix (sign vector times Sylvester H16 / 4) and it is orthogonal: M M^T = I") {
  const std::vector<float> ref = nvfp4_reference::rht_matrix();
  for (std::uint32_t r = 0; r < 16; ++r)
    for (std::uint32_t c = 0; c < 16; ++c) CHECK(tequant::hadamard_entry(r, c) == ref[r * 16 + c]);
  // TE's Python spells the mask as get_sign_from_vector(get_wgrad_sign_vector()).
  unsigned mask = 0;
  for (unsigned i = 0; i < 16; ++i) mask |= (nvfp4_reference::rht_signs[i] == -1 ? 1u : 0u) << i;
  CHECK(tequant::hadamard_sign_mask == mask);
  std::size_t off = 0;
  for (std::uint32_t i = 0; i < 16; ++i)
    for (std::uint32_t j = 0; j < 16; ++j) {
      float dot = 0.0f;
      for (std::uint32_t k = 0; k < 16; ++k) dot += tequant::hadamard_entry(i, k) * tequant::hadamard_entry(j, k);
      off += dot != (i == j ? 1.0f : 0.0f);  // sums of +-1/16: exact in fp32
    }
  CHECK(off == 0);
}

TEST_CASE("hadamard: the inverse undoes the transform (fp32: to rounding; TE's bf16 output: to bf16 precision)") {
  std::mt19937 g(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  double worst_fp32 = 0.0, worst_bf16 = 0.0;
  for (int trial = 0; trial < 200; ++trial) {
    float x[16], y[16], back[16];
    float norm = 0.0f;
    for (float& v : x) {
      v = std::ldexp(nd(g), trial % 9 - 4);
      norm = std::max(norm, std::fabs(v));
    }
    transform(x, y, false);
    inverse(y, back);
    for (int i = 0; i < 16; ++i) worst_fp32 = std::max(worst_fp32, double(std::fabs(back[i] - x[i]) / norm));
    transform(x, y, true);
    inverse(y, back);
    for (int i = 0; i < 16; ++i) worst_bf16 = std::max(worst_bf16, double(std::fabs(back[i] - x[i]) / norm));
  }
  INFO("worst relative error: fp32 " << worst_fp32 << ", bf16 " << worst_bf16);
  CHECK(worst_fp32 < 1e-6);
  CHECK(worst_bf16 < 4 * 0x1p-9);  // each y_c within half a bf16 ulp; ||M^T|| = 1, 4 = sqrt(16) slack
  CHECK(worst_bf16 > 1e-6);        // the bf16 rounding is there
  // Without signs the transform would be its own inverse; with TE's signs applying it twice is not.
  float x[16], y[16], z[16];
  for (int i = 0; i < 16; ++i) x[i] = static_cast<float>(i + 1);
  transform(x, y, false);
  transform(y, z, false);
  bool differs = false;
  for (int i = 0; i < 16; ++i) differs = differs || z[i] != x[i];
  CHECK(differs);
}

TEST_CASE("hadamard: agrees with a plain 16x16 matrix multiply (double) to fp32 rounding, bf16 output to bf16") {
  const std::vector<float> m = nvfp4_reference::rht_matrix();
  const std::vector<float> data = random_tensor(16 * 300, 11, false);
  std::size_t bad32 = 0, bad16 = 0, exact16 = 0;
  for (std::size_t g = 0; g < 300; ++g) {
    const float* x = data.data() + g * 16;
    float y32[16], y16[16], norm = 0.0f;
    for (int r = 0; r < 16; ++r) norm = std::max(norm, std::fabs(x[r]));
    transform(x, y32, false);
    transform(x, y16, true);
    for (int c = 0; c < 16; ++c) {
      double want = 0.0;
      for (int r = 0; r < 16; ++r) want += static_cast<double>(x[r]) * m[r * 16 + c];
      bad32 += std::fabs(y32[c] - want) > 16 * 0x1p-24 * norm;  // 16 roundings of at most norm's half-ulp
      bad16 += std::fabs(y16[c] - want) > 0x1p-8 * std::fabs(want) + 16 * 0x1p-24 * norm;
      exact16 += y16[c] == nvfp4_reference::bf16_round(static_cast<float>(want));
    }
  }
  CHECK(bad32 == 0);
  CHECK(bad16 == 0);
  CHECK(exact16 > 300 * 16 * 9 / 10);  // mostly the correctly rounded value; fp32 sums differ rarely
}

TEST_CASE("nvfp4 RHT: host casts match the reference byte for byte (fp32, bf16, fp16, outliers, zeros, NaN, inf)") {
  // Rows are whole 16-row groups; cols include partial rowwise blocks (34, 40, 150).
  const std::size_t shapes[][2] = {{16, 16}, {16, 2}, {32, 64}, {48, 40}, {64, 34}, {128, 150}, {32, 256}};
  unsigned seed = 100;
  for (const auto& s : shapes)
    for (const bool specials : {false, true}) {
      const auto x = random_tensor(s[0] * s[1], seed++, specials);
      check_against_reference<float>(x, s[0], s[1]);
      check_against_reference<tequant::bf16>(x, s[0], s[1]);
      check_against_reference<tequant::fp16>(x, s[0], s[1]);  // outliers past 65504 become inf
    }
}

TEST_CASE("nvfp4 RHT: the block scale divides by 6 first, as TE's fused kernel (the plain rule rounds apart here)") {
  // Two (block amax, S_enc) pairs, found by search, where the orders give different E4M3 codes.
  const float pairs[][2] = {{0x1.5d15f4p+5f, 0x1.4e67a8p+4f}, {0x1.db6214p+4f, 0x1.b76d38p+4f}};
  for (const auto& p : pairs) {
    const std::uint8_t fused = tequant::detail::nvfp4_rht_block_scale(p[0], p[1]);
    CHECK(fused == nvfp4_reference::e4m3(p[0] / 6.0f * p[1]));
    CHECK(fused != tequant::nvfp4_block_scale(p[0], p[1]));
  }
}

TEST_CASE("nvfp4 RHT: edge tensors; a NaN's group gets scale 0x7F as in TE's fused kernel") {
  const std::size_t M = 32, K = 16;
  check_against_reference<float>(std::vector<float>(M * K, 0.0f), M, K);
  check_against_reference<float>(std::vector<float>(M * K, nan_f), M, K);
  check_against_reference<float>(std::vector<float>(M * K, 1e-40f), M, K);  // subnormal input
  auto x = random_tensor(M * K, 5, false);
  x[3 * K + 2] = nan_f;  // column 2, rows 0-15: that block's scale is NaN
  x[20 * K + 7] = inf_f;
  x[21 * K + 7] = -inf_f;  // column 7, rows 16-31: +inf - inf and -inf in the transformed group
  check_against_reference<float>(x, M, K);
  host_backend be;
  const cast_plan plan = rht_plan();
  quantized_tensor<host_backend> q;
  q.prepare(be, plan, M, K);
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, q.output());
  const auto cs = tequant::nvfp4_columnwise_scale_shape(M, K);
  CHECK(q.output().columnwise_block_scale[2 * cs.cols + 0] == 0x7F);
  CHECK(q.output().columnwise_block_scale[2 * cs.cols + 1] != 0x7F);
  CHECK(q.output().columnwise_block_scale[7 * cs.cols + 1] == 0x7F);  // inf - inf = NaN in the group
  // The rowwise copy is untouched by the transform: its global scale is from the plain amax (inf: 1).
  CHECK(q.output().rowwise_scale_inv[0] == 1.0f);
}

TEST_CASE("nvfp4 RHT: stochastic rounding draws the columnwise stream after the rowwise one, as without RHT") {
  const std::size_t M = 32, K = 48, n = M * K;
  const auto x = random_tensor(n, 21, false);
  host_backend be;
  cast_plan plan = rht_plan();
  plan.rng_seed = 99;
  std::uint64_t offset = 1000;
  plan.rng_offset = &offset;
  quantized_tensor<host_backend> both, col_only, again;
  both.prepare(be, plan, M, K);
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, both.output());
  CHECK(offset == 1000 + 2 * ((n + 3) / 4));
  // Columnwise alone from the same offset: the same codes (its stream starts after the rowwise one).
  offset = 1000;
  col_only.prepare(be, plan, M, K);
  auto o = col_only.output();
  o.rowwise_data = {};
  be.quantize(matrix_view<const float>{x.data(), M, K}, plan, o);
  CHECK(offset == 1000 + 2 * ((n + 3) / 4));  // past the last group drawn: the next cast reuses none
  CHECK(std::ranges::equal(o.columnwise_data, both.output().columnwise_data));
  CHECK(std::ranges::equal(o.columnwise_block_scale, both.output().columnwise_block_scale));
  // Round to nearest differs from the stochastic codes somewhere; the block scales do not.
  cast_plan rn = rht_plan();
  again.prepare(be, rn, M, K);
  be.quantize(matrix_view<const float>{x.data(), M, K}, rn, again.output());
  CHECK_FALSE(std::ranges::equal(again.output().columnwise_data, both.output().columnwise_data));
  CHECK(std::ranges::equal(again.output().columnwise_block_scale, both.output().columnwise_block_scale));
}

TEST_CASE("nvfp4 RHT: shapes it cannot transform are tequant errors; rowwise-only casts need no 16-row groups") {
  host_backend be;
  std::vector<float> x(18 * 16, 1.0f);
  const cast_plan plan = rht_plan();
  quantized_tensor<host_backend> q;
  q.prepare(be, plan, 18, 16);
  CHECK_THROWS_WITH_AS(be.quantize(matrix_view<const float>{x.data(), 18, 16}, plan, q.output()),
                       doctest::Contains("rows must be a multiple of 16 (got 18)"), tequant::error);
  auto o = q.output();
  o.columnwise_data = {};
  CHECK_NOTHROW(be.quantize(matrix_view<const float>{x.data(), 18, 16}, plan, o));
  std::vector<float> out(18 * 16);
  CHECK_THROWS_WITH_AS(be.dequantize(plan, 18, 16, q.output(), true, out), doctest::Contains("multiple of 16"),
                       tequant::error);
  cast_plan tiled = rht_plan();
  tiled.tile_2d = true;
  quantized_tensor<host_backend> t;
  t.prepare(be, tiled, 16, 16);
  CHECK_THROWS_WITH_AS(be.quantize(matrix_view<const float>{x.data(), 16, 16}, tiled, t.output()),
                       doctest::Contains("both tile_2d and columnwise_rht"), tequant::error);
}
