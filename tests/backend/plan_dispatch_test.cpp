// SPDX-License-Identifier: Apache-2.0
// backend.quantize(input, plan, output): each scaling mode writes exactly what its kernel entry point
// writes, sizes come from layout_of(), and plans that cannot be carried out are refused.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/quantized_tensor.hpp"

namespace {

using namespace tequant;

std::vector<float> sample(std::size_t rows, std::size_t cols) {
  std::vector<float> x(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = std::ldexp(static_cast<float>(static_cast<int>(i * 37 % 101) - 50), static_cast<int>(i % 13) - 8);
  return x;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

}  // namespace

TEST_CASE("tensor_scale: the codes, scale_inv and amax of quantize_tensor; both directions share them") {
  const host_backend be;
  const std::size_t M = 8, K = 24;
  const auto x = sample(M, K);
  const float scale = 3.5f;
  float amax_plan = 0.25f, amax_direct = 0.25f;
  cast_plan p{&scale, &amax_plan, fp8_dtype::e5m2};
  quantized_tensor<host_backend> q;
  q.prepare(be, p, M, K);
  CHECK(q.layout().shared_directions);
  CHECK_FALSE(q.has_columnwise());
  be.quantize(matrix_view<const float>{x.data(), M, K}, p, q.output());

  std::vector<std::uint8_t> codes(M * K);
  float si = 0.0f;
  be.quantize_tensor(x.data(), x.size(), &scale, fp8_dtype::e5m2, codes.data(), &si, &amax_direct);
  const auto o = q.output();
  CHECK(std::memcmp(o.rowwise_data.data(), codes.data(), codes.size()) == 0);
  CHECK(o.rowwise_scale_inv[0] == si);
  CHECK(amax_plan == amax_direct);

  // Asked for both directions explicitly, the columnwise copy holds the same codes.
  std::vector<std::uint8_t> row(M * K), col(M * K);
  float rsi = 0, csi = 0;
  be.quantize(matrix_view<const float>{x.data(), M, K}, p, {row, col, {&rsi, 1}, {&csi, 1}, {}, {}});
  CHECK(row == col);
  CHECK(rsi == csi);
  std::vector<float> back_row(M * K), back_col(M * K);
  be.dequantize(p, M, K, {row, col, {&rsi, 1}, {&csi, 1}, {}, {}}, false, back_row);
  be.dequantize(p, M, K, {row, col, {&rsi, 1}, {&csi, 1}, {}, {}}, true, back_col);
  CHECK(same_bits(back_row, back_col));
}

TEST_CASE("tensor_current, mxfp8 and block: the bytes of their kernel entry points") {
  const host_backend be;
  const std::size_t M = 64, K = 160;
  const auto x = sample(M, K);
  const matrix_view<const float> xv{x.data(), M, K};

  SUBCASE("tensor_current") {
    cast_plan p{nullptr, nullptr, fp8_dtype::e4m3, scaling_mode::tensor_current};
    p.power_2_scale = true;
    p.amax_epsilon = 1e-3f;
    quantized_tensor<host_backend> q;
    q.prepare(be, p, M, K);
    be.quantize(xv, p, q.output());
    std::vector<std::uint8_t> codes(M * K);
    float si = 0.0f;
    be.quantize_current(x.data(), x.size(), fp8_dtype::e4m3, true, 1e-3f, codes.data(), &si);
    CHECK(std::memcmp(q.output().rowwise_data.data(), codes.data(), codes.size()) == 0);
    CHECK(q.output().rowwise_scale_inv[0] == si);
  }
  SUBCASE("mxfp8, 1D and 2D") {
    const std::size_t K32 = 128;
    const auto y = sample(M, K32);
    for (bool tile_2d : {false, true}) {
      cast_plan p{nullptr, nullptr, fp8_dtype::e4m3, scaling_mode::mxfp8};
      p.tile_2d = tile_2d;
      quantized_tensor<host_backend> q;
      q.prepare(be, p, M, K32);
      CHECK(q.has_columnwise());
      be.quantize(matrix_view<const float>{y.data(), M, K32}, p, q.output());
      std::vector<std::uint8_t> rd(M * K32), cd(M * K32), rs(mxfp8_rowwise_scale_shape(M, K32).size()),
          cs(mxfp8_columnwise_scale_shape(M, K32).size());
      be.quantize_mxfp8(matrix_view<const float>{y.data(), M, K32}, fp8_dtype::e4m3, tile_2d, {rd, rs, cd, cs});
      const auto o = q.output();
      CHECK(std::equal(rd.begin(), rd.end(), o.rowwise_data.begin()));
      CHECK(std::equal(cd.begin(), cd.end(), o.columnwise_data.begin()));
      CHECK(std::equal(rs.begin(), rs.end(), o.rowwise_block_scale.begin()));
      CHECK(std::equal(cs.begin(), cs.end(), o.columnwise_block_scale.begin()));
      std::vector<float> a(M * K32), b(M * K32);
      be.dequantize(p, M, K32, o, true, a);
      be.dequantize_mxfp8(cd, M, K32, fp8_dtype::e4m3, true, cs, b);
      CHECK(same_bits(a, b));
    }
  }
  SUBCASE("block, 1x128 and 128x128, transposed columnwise copy") {
    for (bool tile_2d : {false, true}) {
      cast_plan p{nullptr, nullptr, fp8_dtype::e4m3, scaling_mode::block};
      p.tile_2d = tile_2d;
      p.power_2_scale = true;
      quantized_tensor<host_backend> q;
      q.prepare(be, p, M, K);
      CHECK(q.layout().columnwise_transposed);
      be.quantize(xv, p, q.output());
      std::vector<std::uint8_t> rd(M * K), cd(M * K);
      std::vector<float> rs(block_scale_shape(M, K, tile_2d, false).size()), cs(block_scale_shape(M, K, tile_2d, true).size());
      be.quantize_block(xv, fp8_dtype::e4m3, tile_2d, true, 0.0f, {rd, rs, cd, cs});
      const auto o = q.output();
      CHECK(std::equal(rd.begin(), rd.end(), o.rowwise_data.begin()));
      CHECK(std::equal(cd.begin(), cd.end(), o.columnwise_data.begin()));
      CHECK(same_bits(rs, o.rowwise_scale_inv));
      CHECK(same_bits(cs, o.columnwise_scale_inv));
      std::vector<float> a(M * K), b(M * K);
      be.dequantize(p, M, K, o, true, a);
      be.dequantize_block(cd, M, K, fp8_dtype::e4m3, tile_2d, true, cs, b);
      CHECK(same_bits(a, b));
    }
  }
}

TEST_CASE("plans that cannot be carried out are refused with a tequant::error and write nothing") {
  const host_backend be;
  const auto x = sample(32, 32);
  const matrix_view<const float> xv{x.data(), 32, 32};
  std::vector<std::uint8_t> data(32 * 32, 0xAB);
  float si = -1.0f, amax = 0.0f, scale = 1.0f;
  const quantized_output o{data, {}, {&si, 1}, {}, {}, {}};

  cast_plan disabled{&scale, &amax, fp8_dtype::e4m3};
  disabled.enabled = false;
  CHECK_THROWS_WITH_AS(be.quantize(xv, disabled, o), doctest::Contains("plan is for high precision"), tequant::error);
  cast_plan mx_amax{nullptr, &amax, fp8_dtype::e4m3, scaling_mode::mxfp8};
  CHECK_THROWS_WITH_AS(be.quantize(xv, mx_amax, o), doctest::Contains("mxfp8 plan records no amax"), tequant::error);
  cast_plan no_scale{nullptr, nullptr, fp8_dtype::e4m3, scaling_mode::tensor_scale};
  CHECK_THROWS_WITH_AS(be.quantize(xv, no_scale, o), doctest::Contains("without a scale"), tequant::error);
  cast_plan ok{&scale, &amax, fp8_dtype::e4m3};
  const quantized_output short_data{std::span<std::uint8_t>(data).first(10), {}, {&si, 1}, {}, {}, {}};
  CHECK_THROWS_WITH_AS(be.quantize(xv, ok, short_data), doctest::Contains("rowwise_data has 10 elements"), tequant::error);
  CHECK(data[0] == 0xAB);
  CHECK(si == -1.0f);
  CHECK(amax == 0.0f);
}
