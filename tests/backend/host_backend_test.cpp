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

// The 128x128 block kernel (the vector path where the CPU has it) against the portable loop, bit for
// bit: partial tiles at both edges, K past the kernel's 32768-column chunk, several row blocks (the
// kernel casts each while it reads the next: a full last block, a partial one, one of a single row),
// tiles of different magnitudes (a scale applied to the wrong tile or row block shows), a tile holding
// an inf, one of zeros only, one of denormals only, NaN and -0 scattered; with and without the codes,
// with streaming stores.
TEST_CASE_TEMPLATE("host block 128x128 kernel against the portable loop [" TEQUANT_TEST_VARIANT "]", T, float,
                   tequant::bf16, tequant::fp16) {
  namespace td = tequant::detail;
  using tequant::fp8_dtype;
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  struct shape {
    std::size_t M, K;
  };
  for (const shape sh : {shape{1, 1}, shape{3, 130}, shape{128, 256}, shape{77, 300}, shape{128, 1000}, shape{5, 32768 + 200},
                         shape{256, 384}, shape{300, 1000}, shape{129, 200}, shape{131, 32768 + 200}}) {
    const std::size_t M = sh.M, K = sh.K, KB = (K + 127) / 128, MB = (M + 127) / 128;
    CAPTURE(M);
    CAPTURE(K);
    std::vector<T> x(M * K);
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k = 0; k < K; ++k) {
        const std::size_t kb = k / 128;
        float v = u(rng) * std::exp2(static_cast<float>(static_cast<int>((kb + 5 * (m / 128)) % 23) - 11));
        if (kb == 1) v = 0.0f;                                                   // zeros only
        if (kb == 2) v = ref::from_bits(1 + rng() % 0x7FFFFF);  // denormals only (0 in bf16/fp16)
        const unsigned r = rng() % 500;
        if (r == 0) v = std::numeric_limits<float>::quiet_NaN();
        if (r == 1) v = -0.0f;
        if (r == 2) v = -std::numeric_limits<float>::quiet_NaN();
        if (kb == 3 && m == M / 2 && k == 3 * 128 + 5) v = -std::numeric_limits<float>::infinity();
        x[m * K + k] = backend_suite::from_float<T>(v);
      }
    for (const fp8_dtype d : {fp8_dtype::e4m3, fp8_dtype::e5m2})
      for (const bool pow2 : {false, true}) {
        CAPTURE(pow2);
        const float eps = pow2 ? 0.0f : 1e-30f;
        std::vector<std::uint8_t> q(M * K + 16), wq(M * K);
        std::vector<float> s(MB * KB), ws(MB * KB), s2(MB * KB, -1.0f);
        // 16-byte aligned so that the streaming path runs when asked to.
        std::uint8_t* qd = q.data() + (16 - reinterpret_cast<std::uintptr_t>(q.data()) % 16) % 16;
        td::with_dtype(d, [&]<fp8_dtype D>() {
          td::block_2d_scalar<D>(x.data(), M, K, wq.data(), ws.data(), pow2, eps, td::input_type_max<T>());
          for (const bool stream : {false, true}) {
            CAPTURE(stream);
            std::fill(q.begin(), q.end(), std::uint8_t{0xAB});
            td::block_2d_host<D>(x.data(), M, K, qd, s.data(), pow2, eps, td::input_type_max<T>(), stream);
            CHECK(std::memcmp(qd, wq.data(), M * K) == 0);
            CHECK(std::memcmp(s.data(), ws.data(), MB * KB * sizeof(float)) == 0);
          }
          td::block_2d_host<D>(x.data(), M, K, nullptr, s2.data(), pow2, eps, td::input_type_max<T>(), false);
          CHECK(std::memcmp(s2.data(), ws.data(), MB * KB * sizeof(float)) == 0);
        });
        if (MB > 1) CHECK(ws[0] != ws[KB]);  // the row blocks' scales differ
        if (KB > 4) {
          CHECK(ws[0] != ws[4]);  // the tiles' scales differ
          CHECK(ws[M / 2 / 128 * KB + 3] == 1.0f);  // the tile holding -inf
          if (eps == 0.0f) CHECK(ws[1] == 1.0f);  // zeros only
        }
      }
  }
}

// Outputs of streaming_store_min_bytes or more are written with non-temporal stores by the AVX2
// kernels (16-byte aligned destinations only; the per-tensor cast peels up to the first boundary;
// through the backend the per-tensor casts stream only past per_tensor_stream_min_bytes, at least as
// large, which host_avx512_test covers by calling the kernels at the smallest size).
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
    {
      // MXFP8 columnwise kernel asked to stream, on the whole matrix (as host_backend calls it for the
      // columnwise direction alone), then one 32-row block at a time (as it calls it with both).
      const std::size_t K = 4128, M = (td::streaming_store_min_bytes / K / 32 + 1) * 32;
      const auto cs = tequant::mxfp8_columnwise_scale_shape(M, K);
      std::vector<std::uint8_t> q(M * K + 16), s(cs.size()), wq(M * K), ws(cs.size());
      std::uint8_t* qd = q.data() + (16 - reinterpret_cast<std::uintptr_t>(q.data()) % 16) % 16;
      if (qd + offset + M * K > q.data() + q.size()) qd -= 16;
      qd += offset;
      td::mxfp8_columnwise_scalar<fp8_dtype::e4m3>(x.data(), M, K, wq.data(), ws.data(), cs.cols);
      td::mxfp8_columnwise_host<fp8_dtype::e4m3>(x.data(), M, K, qd, s.data(), cs.cols, true);
      CHECK(std::memcmp(qd, wq.data(), M * K) == 0);
      for (std::size_t mb = 0; mb < M / 32; ++mb) CHECK(std::memcmp(s.data() + mb * cs.cols, ws.data() + mb * cs.cols, K) == 0);
      std::fill(q.begin(), q.end(), std::uint8_t{0});
      std::fill(s.begin(), s.end(), std::uint8_t{0});
      for (std::size_t mb = 0; mb < M / 32; ++mb)
        td::mxfp8_columnwise_host<fp8_dtype::e4m3>(x.data() + mb * 32 * K, 32, K, qd + mb * 32 * K, s.data() + mb * cs.cols, cs.cols, true);
      CHECK(std::memcmp(qd, wq.data(), M * K) == 0);
      for (std::size_t mb = 0; mb < M / 32; ++mb) CHECK(std::memcmp(s.data() + mb * cs.cols, ws.data() + mb * cs.cols, K) == 0);
    }
    {
      // Block 128x128 rowwise, a partial last tile and a partial last row block.
      const std::size_t K = 4240, M = td::streaming_store_min_bytes / K + 1;
      const auto rs = tequant::block_2d_rowwise_scale_shape(M, K);
      std::vector<std::uint8_t> q(M * K + 16), wq(M * K);
      std::vector<float> s(rs.size()), ws(rs.size(), 0.0f), tile(rs.cols);
      std::uint8_t* qd = q.data() + (16 - reinterpret_cast<std::uintptr_t>(q.data()) % 16) % 16;
      if (qd + offset + M * K > q.data() + q.size()) qd -= 16;
      qd += offset;
      b.quantize_block(tequant::matrix_view<const T>{x.data(), M, K}, fp8_dtype::e4m3, true, true, 0.0f,
                       tequant::block_output{{qd, M * K}, s, {}, {}});
      for (std::size_t r0 = 0; r0 < M; r0 += 128) {
        td::block_2d_scalar<fp8_dtype::e4m3>(x.data() + r0 * K, std::min<std::size_t>(128, M - r0), K, wq.data() + r0 * K,
                                             tile.data(), true, 0.0f, td::input_type_max<T>());
        for (std::size_t kb = 0; kb < (K + 127) / 128; ++kb) ws[r0 / 128 * rs.cols + kb] = 1.0f / tile[kb];
      }
      CHECK(std::memcmp(qd, wq.data(), M * K) == 0);
      CHECK(std::memcmp(s.data(), ws.data(), s.size() * sizeof(float)) == 0);
    }
  }
}
