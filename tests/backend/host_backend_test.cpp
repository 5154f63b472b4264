// SPDX-License-Identifier: Apache-2.0
// The backend suite on host_backend. This file is compiled three times: with the project's default
// flags (AVX2 kernels chosen at run time where the CPU has them), with -march=native (the same kernels
// inlined), and with TEQUANT_DISABLE_HOST_SIMD (the portable loops only).
#include <doctest/doctest.h>

#include "backend/backend_suite.hpp"
#include "tequant/backend/host.hpp"

#ifndef TEQUANT_TEST_VARIANT
#  define TEQUANT_TEST_VARIANT "default"
#endif

TEST_CASE_TEMPLATE("host per-tensor quantize (delayed, current) [" TEQUANT_TEST_VARIANT "]", T, float, tequant::bf16, tequant::fp16) {
  tequant::host_backend b;
  backend_suite::check_per_tensor<T>(b);
}

TEST_CASE_TEMPLATE("host MXFP8 quantize [" TEQUANT_TEST_VARIANT "]", T, float, tequant::bf16, tequant::fp16) {
  tequant::host_backend b;
  backend_suite::check_mxfp8<T>(b);
}

TEST_CASE_TEMPLATE("host MXFP8: zero-code and inf blocks encode as TransformerEngine [" TEQUANT_TEST_VARIANT "]", T, float,
                   tequant::bf16, tequant::fp16) {
  tequant::host_backend b;
  backend_suite::check_mxfp8_te_edges<T>(b);
}

TEST_CASE_TEMPLATE("host FP8 block quantize [" TEQUANT_TEST_VARIANT "]", T, float, tequant::bf16, tequant::fp16) {
  tequant::host_backend b;
  backend_suite::check_block<T>(b);
}

TEST_CASE_TEMPLATE("host MXFP8 and block rowwise on long rows [" TEQUANT_TEST_VARIANT "]", T, float, tequant::bf16, tequant::fp16) {
  tequant::host_backend b;
  backend_suite::check_wide_rows<T>(b);
}

TEST_CASE("host shape errors [" TEQUANT_TEST_VARIANT "]") {
  tequant::host_backend b;
  backend_suite::check_shape_errors(b);
}

TEST_CASE("host dequantize inverts quantize up to FP8 rounding [" TEQUANT_TEST_VARIANT "]") {
  tequant::host_backend b;
  const std::size_t M = 64, K = 256;
  std::vector<float> x(M * K);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * 3.0f;
  std::vector<std::uint8_t> q(M * K), sc(tequant::mxfp8_rowwise_scale_shape(M, K).size());
  b.quantize_mxfp8(tequant::matrix_view<const float>{x.data(), M, K}, tequant::fp8_dtype::e4m3, false,
                   tequant::mxfp8_output{q, sc, {}, {}});
  std::vector<float> back(M * K);
  b.dequantize_mxfp8(q, M, K, tequant::fp8_dtype::e4m3, false, sc, back);
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(double(back[i]) - x[i]) / 3.0);
  CHECK(worst < 0.07);  // E4M3 relative step is 1/8 -> half-step 6.25% of the block max at most
  std::vector<float> bsc(tequant::block_1d_columnwise_scale_shape(M, K).size());
  b.quantize_block(tequant::matrix_view<const float>{x.data(), M, K}, tequant::fp8_dtype::e4m3, false, true, 0.0f,
                   tequant::block_output{{}, {}, q, bsc});
  b.dequantize_block(q, M, K, tequant::fp8_dtype::e4m3, false, true, bsc, back);
  worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(double(back[i]) - x[i]) / 3.0);
  CHECK(worst < 0.07);
}
