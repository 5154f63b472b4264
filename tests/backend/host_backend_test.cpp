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

// Outputs of streaming_store_min_bytes or more are written with non-temporal stores by the AVX2
// kernels (16-byte aligned destinations only; the per-tensor cast peels up to the first boundary).
// Byte for byte the same as the portable loops, at aligned and unaligned destinations.
TEST_CASE_TEMPLATE("host quantizers on outputs large enough to stream [" TEQUANT_TEST_VARIANT "]", T, float, tequant::bf16) {
  namespace td = tequant::detail;
  using tequant::fp8_dtype;
  tequant::host_backend b;
  std::mt19937 rng(17);
  const std::size_t n = td::streaming_store_min_bytes + 77;
  const std::vector<T> x = backend_suite::random_values<T>(rng, n + 65536, 40.0f);  // the matrices below need M*K <= this
  std::vector<std::uint8_t> buf(n + 16), want(n);
  for (const std::size_t offset : {std::size_t{0}, std::size_t{1}, std::size_t{5}}) {
    for (const fp8_dtype d : {fp8_dtype::e4m3, fp8_dtype::e5m2}) {
      CAPTURE(offset);
      // Align the base so that `offset` is the destination's distance from a 16-byte boundary.
      std::uint8_t* out = buf.data() + (16 - reinterpret_cast<std::uintptr_t>(buf.data()) % 16) % 16 + offset;
      if (out + n > buf.data() + buf.size()) out -= 16;
      const float scale = 3.0f;
      float amax = 0.0f, scale_inv = 0.0f;
      b.quantize_tensor(x.data(), n, &scale, d, out, &scale_inv, &amax);
      std::uint32_t want_amax = 0;
      td::with_dtype(d, [&]<fp8_dtype D>() { want_amax = td::scale_encode_scalar<D>(x.data(), n, scale, want.data(), true); });
      CHECK(std::memcmp(out, want.data(), n) == 0);
      CHECK(td::float_bits(amax) == want_amax);
    }
  }
  // MXFP8 and 1x128 block rowwise: K = 4128 (not a multiple of the 8-block group) and 4240 (a
  // partial last tile); a destination 1 byte off a boundary takes the ordinary stores.
  for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
    CAPTURE(offset);
    {
      const std::size_t K = 4128, M = (td::streaming_store_min_bytes / K / 32 + 1) * 32;  // MXFP8: M % 32 == 0
      const auto rs = tequant::mxfp8_rowwise_scale_shape(M, K);
      std::vector<std::uint8_t> q(M * K + 16), s(rs.size()), wq(M * K), ws(rs.size());
      std::uint8_t* qd = q.data() + (16 - reinterpret_cast<std::uintptr_t>(q.data()) % 16) % 16;
      if (qd + offset + M * K > q.data() + q.size()) qd -= 16;
      qd += offset;
      b.quantize_mxfp8(tequant::matrix_view<const T>{x.data(), M, K}, fp8_dtype::e4m3, false,
                       tequant::mxfp8_output{{qd, M * K}, s, {}, {}});
      td::mxfp8_rowwise_scalar<fp8_dtype::e4m3>(x.data(), M, K, wq.data(), ws.data(), rs.cols);
      CHECK(std::memcmp(qd, wq.data(), M * K) == 0);
      for (std::size_t m = 0; m < M; ++m) CHECK(std::memcmp(s.data() + m * rs.cols, ws.data() + m * rs.cols, K / 32) == 0);
    }
    {
      const std::size_t K = 4240, M = td::streaming_store_min_bytes / K + 1;
      const auto rs = tequant::block_1d_rowwise_scale_shape(M, K);
      std::vector<std::uint8_t> q(M * K + 16), wq(M * K);
      std::vector<float> s(rs.size()), ws(rs.size());
      std::uint8_t* qd = q.data() + (16 - reinterpret_cast<std::uintptr_t>(q.data()) % 16) % 16;
      if (qd + offset + M * K > q.data() + q.size()) qd -= 16;
      qd += offset;
      b.quantize_block(tequant::matrix_view<const T>{x.data(), M, K}, fp8_dtype::e4m3, false, false, 0.0f,
                       tequant::block_output{{qd, M * K}, s, {}, {}});
      td::block_rowwise_scalar<fp8_dtype::e4m3>(x.data(), M, K, wq.data(), ws.data(), rs.cols, false, 0.0f,
                                                td::input_type_max<T>());
      CHECK(std::memcmp(qd, wq.data(), M * K) == 0);
      CHECK(std::memcmp(s.data(), ws.data(), s.size() * sizeof(float)) == 0);
    }
  }
}
