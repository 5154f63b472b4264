// SPDX-License-Identifier: Apache-2.0
// Backend-generic quantizer checks against the scalar references. Everything goes through the
// backend's make_buffer / upload / download, so a .cu test can run the same checks on cuda_backend:
//   #include "backend/backend_suite.hpp"
//   TEST_CASE("...") { tequant::cuda_backend b{stream}; backend_suite::check_per_tensor<float>(b); }
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "backend/scalar_reference.hpp"
#include "tequant/backend/layouts.hpp"
#include "tequant/format/e8m0.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/half.hpp"

namespace backend_suite {

template <class T>
T from_float(float f) {
  if constexpr (std::is_same_v<T, tequant::bf16>) return tequant::to_bf16(f);
  else if constexpr (std::is_same_v<T, tequant::fp16>) return tequant::to_fp16(f);
  else return f;
}

/// Values that hit every edge: 0, -0, NaN (both signs), +-inf, denormals, the largest floats, exact
/// FP8 rounding ties, values just around the saturation point, and ordinary random magnitudes.
inline float edge_value(std::mt19937& rng, float magnitude) {
  const unsigned k = rng() % 40;
  const float inf = std::numeric_limits<float>::infinity();
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  switch (k) {
    case 0: return 0.0f;
    case 1: return -0.0f;
    case 2: return std::numeric_limits<float>::quiet_NaN();
    case 3: return -std::numeric_limits<float>::quiet_NaN();
    case 4: return inf;
    case 5: return -inf;
    case 6: return ref::from_bits(1 + rng() % 0x7FFFFF);               // positive denormal
    case 7: return ref::from_bits(0x80000000u | (1 + rng() % 0x7FFFFF));  // negative denormal
    case 8: return std::numeric_limits<float>::max() * (rng() % 2 ? 1.0f : -1.0f);
    case 9: return 3.0e38f * u(rng);
    case 10: return (448.0f + 8.0f) * (rng() % 2 ? 1.0f : -1.0f) * magnitude / 448.0f;   // e4m3 tie near max
    case 11: return 1.0625f * magnitude / 448.0f;  // an e4m3 mantissa tie after scaling by 448/magnitude
    case 12: return std::ldexp(u(rng), -130);
    default: return u(rng) * magnitude * std::exp2(static_cast<float>(static_cast<int>(rng() % 24) - 12));
  }
}

template <class T>
std::vector<T> random_values(std::mt19937& rng, std::size_t n, float magnitude) {
  std::vector<T> v(n);
  for (auto& x : v) x = from_float<T>(edge_value(rng, magnitude));
  return v;
}

template <class Backend, class T>
auto upload(Backend& b, const std::vector<T>& host) {
  auto buf = b.template make_buffer<T>(host.size());
  b.upload(buf.data(), host.data(), host.size());
  return buf;
}

template <class Backend, class T, class Buf>
std::vector<T> download(Backend& b, const Buf& buf, std::size_t n) {
  std::vector<T> host(n);
  b.download(host.data(), buf.data(), n);
  return host;
}

inline bool same_bits(float a, float b) { return ref::bits(a) == ref::bits(b); }

/// Delayed and current scaling: any length, any alignment, fp8 bytes, scale_inv and amax bit-equal.
template <class T, class Backend>
void check_per_tensor(Backend& b, unsigned seed = 1) {
  std::mt19937 rng(seed);
  const float scales[] = {1.0f, 448.0f / 3.0f, 1.0e-3f, 7.5e30f, 2.0f, 1.0e-40f};
  for (int iter = 0; iter < 60; ++iter) {
    const std::size_t n = (iter % 5 == 0) ? rng() % 8 : rng() % 300;
    const std::size_t off = rng() % 4;  // misaligned starts
    const float magnitude = std::exp2(static_cast<float>(static_cast<int>(rng() % 40) - 20));
    std::vector<T> xs = random_values<T>(rng, n + off, magnitude);
    const float scale = scales[iter % 6];
    for (const tequant::fp8_dtype d : {tequant::fp8_dtype::e4m3, tequant::fp8_dtype::e5m2}) {
      CAPTURE(n);
      CAPTURE(off);
      CAPTURE(scale);
      auto x = upload(b, xs);
      auto out = b.template make_buffer<std::uint8_t>(n + off);
      const float prior_amax = (iter % 3 == 0) ? 1.0e9f : 0.5f;  // max-accumulated, never overwritten
      auto state = upload(b, std::vector<float>{scale, 0.0f, prior_amax});
      b.quantize_tensor(x.data() + off, n, state.data(), d, out.data() + off, state.data() + 1, state.data() + 2);
      const auto q = download<Backend, std::uint8_t>(b, out, n + off);
      const auto st = download<Backend, float>(b, state, 3);
      bool bytes_ok = true;
      for (std::size_t i = 0; i < n; ++i) bytes_ok = bytes_ok && q[off + i] == ref::encode(d, ref::widen(xs[off + i]) * scale);
      CHECK(bytes_ok);
      CHECK(same_bits(st[1], 1.0f / scale));
      CHECK(same_bits(st[2], std::fmax(prior_amax, ref::amax(xs.data() + off, n))));

      // Current scaling: amax, scale, cast.
      auto cur = upload(b, std::vector<float>{0.0f, 0.0f, 0.0f});
      b.amax(x.data() + off, n, cur.data());
      const bool pow2 = iter % 2 == 1;
      b.compute_scale(cur.data(), d, pow2, 0.0f, cur.data() + 1, cur.data() + 2);
      b.quantize_tensor(x.data() + off, n, cur.data() + 1, d, out.data() + off, nullptr, nullptr);
      const auto c = download<Backend, float>(b, cur, 3);
      const float ra = ref::amax(xs.data() + off, n);
      const float rs = ref::scale_from_amax(ra, tequant::fp8_max(d), pow2, 0.0f, std::numeric_limits<float>::max());
      CHECK(same_bits(c[0], ra));
      CHECK(same_bits(c[1], rs));
      CHECK(same_bits(c[2], 1.0f / rs));
      const auto q2 = download<Backend, std::uint8_t>(b, out, n + off);
      bytes_ok = true;
      for (std::size_t i = 0; i < n; ++i) bytes_ok = bytes_ok && q2[off + i] == ref::encode(d, ref::widen(xs[off + i]) * rs);
      CHECK(bytes_ok);
    }
  }
}

/// MXFP8 rowwise, columnwise and 32x32 tiles against the reference, with TE's padded scale shapes.
template <class T, class Backend>
void check_mxfp8(Backend& b, unsigned seed = 2) {
  std::mt19937 rng(seed);
  const std::size_t dims[] = {32, 64, 96, 160, 256};
  for (int iter = 0; iter < 16; ++iter) {
    const std::size_t M = dims[rng() % 5], K = dims[rng() % 5];
    const bool tile_2d = iter % 3 == 2;
    const auto d = iter % 2 ? tequant::fp8_dtype::e5m2 : tequant::fp8_dtype::e4m3;
    CAPTURE(M);
    CAPTURE(K);
    CAPTURE(tile_2d);
    const float magnitude = std::exp2(static_cast<float>(static_cast<int>(rng() % 60) - 30));
    const std::vector<T> xs = random_values<T>(rng, M * K, magnitude);
    const auto rs = tequant::mxfp8_rowwise_scale_shape(M, K), cs = tequant::mxfp8_columnwise_scale_shape(M, K);
    auto x = upload(b, xs);
    auto rd = b.template make_buffer<std::uint8_t>(M * K), cd = b.template make_buffer<std::uint8_t>(M * K);
    auto rsc = upload(b, std::vector<std::uint8_t>(rs.size(), 0xAB)), csc = upload(b, std::vector<std::uint8_t>(cs.size(), 0xAB));
    b.quantize_mxfp8(tequant::matrix_view<const T>{x.data(), M, K}, d, tile_2d,
                     tequant::mxfp8_output{{rd.data(), M * K}, {rsc.data(), rs.size()}, {cd.data(), M * K}, {csc.data(), cs.size()}});
    const auto qr = download<Backend, std::uint8_t>(b, rd, M * K), qc = download<Backend, std::uint8_t>(b, cd, M * K);
    const auto er = download<Backend, std::uint8_t>(b, rsc, rs.size()), ec = download<Backend, std::uint8_t>(b, csc, cs.size());
    const float rcp = 1.0f / tequant::fp8_max(d);
    // Reference block amaxes.
    auto block_e = [&](std::size_t m0, std::size_t k0, std::size_t h, std::size_t w) {
      float a = 0.0f;
      for (std::size_t m = m0; m < m0 + h; ++m)
        for (std::size_t k = k0; k < k0 + w; ++k) a = std::fmax(a, std::fabs(ref::widen(xs[m * K + k])));
      return ref::e8m0(a * rcp);
    };
    bool ok = true;
    std::size_t bad = 0;
    for (std::size_t m = 0; m < rs.rows; ++m)
      for (std::size_t kb = 0; kb < rs.cols; ++kb) {
        const std::uint8_t want = (m < M && kb < K / 32) ? (tile_2d ? block_e(m / 32 * 32, kb * 32, 32, 32) : block_e(m, kb * 32, 1, 32)) : 0;
        if (er[m * rs.cols + kb] != want) { ok = false; ++bad; }
      }
    for (std::size_t mb = 0; mb < cs.rows; ++mb)
      for (std::size_t k = 0; k < cs.cols; ++k) {
        const std::uint8_t want = (mb < M / 32 && k < K) ? (tile_2d ? block_e(mb * 32, k / 32 * 32, 32, 32) : block_e(mb * 32, k, 32, 1)) : 0;
        if (ec[mb * cs.cols + k] != want) { ok = false; ++bad; }
      }
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k = 0; k < K; ++k) {
        const float v = ref::widen(xs[m * K + k]);
        if (qr[m * K + k] != ref::encode(d, v * ref::e8m0_mult(er[m * rs.cols + k / 32]))) { ok = false; ++bad; }
        if (qc[m * K + k] != ref::encode(d, v * ref::e8m0_mult(ec[(m / 32) * cs.cols + k]))) { ok = false; ++bad; }
      }
    CAPTURE(bad);
    CHECK(ok);
  }
}

/// The two MXFP8 edge cases where TransformerEngine's kernels are not the exact arithmetic, written
/// out as bytes: a block whose E8M0 code is 0 is multiplied by 1 (TE's reciprocal helper), not 2^127,
/// so {1e-36, 5e-37, 0, ...} flushes to 0x00 0x00; a block holding an inf gets code 254 and TE's
/// flush-to-zero 2^-127 = 0, so the inf becomes NaN (0x7F, either sign) and its neighbours +-0.
/// Rowwise, columnwise (the block laid along the column) and 32x32 tiles, both element types.
template <class T, class Backend>
void check_mxfp8_te_edges(Backend& b) {
  constexpr std::size_t M = 32, K = 64;
  const float inf = std::numeric_limits<float>::infinity();
  for (const tequant::fp8_dtype d : {tequant::fp8_dtype::e4m3, tequant::fp8_dtype::e5m2}) {
    for (const bool tile_2d : {false, true}) {
      CAPTURE(tequant::to_string(d));
      CAPTURE(tile_2d);
      // Column block 0 (columns 0..31): tiny values, placed so that row 0 and column 0 both hold
      // {1e-36, 5e-37, 0, ...}. Column block 1 (32..63): inf at (0, 32), 1 beside and below it, -inf
      // at (1, 33), -1 at (2, 34).
      std::vector<float> v(M * K, 0.0f);
      v[0] = 1e-36f;
      v[1] = 5e-37f;
      v[K] = 5e-37f;
      v[32] = inf;
      v[33] = 1.0f;
      v[K + 32] = 1.0f;
      v[K + 33] = -inf;
      v[2 * K + 34] = -1.0f;
      std::vector<T> xs(M * K);
      for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = from_float<T>(v[i]);
      const auto rs = tequant::mxfp8_rowwise_scale_shape(M, K), cs = tequant::mxfp8_columnwise_scale_shape(M, K);
      auto x = upload(b, xs);
      auto rd = b.template make_buffer<std::uint8_t>(M * K), cd = b.template make_buffer<std::uint8_t>(M * K);
      auto rsc = b.template make_buffer<std::uint8_t>(rs.size()), csc = b.template make_buffer<std::uint8_t>(cs.size());
      b.quantize_mxfp8(tequant::matrix_view<const T>{x.data(), M, K}, d, tile_2d,
                       tequant::mxfp8_output{{rd.data(), M * K}, {rsc.data(), rs.size()}, {cd.data(), M * K}, {csc.data(), cs.size()}});
      const auto qr = download<Backend, std::uint8_t>(b, rd, M * K), qc = download<Backend, std::uint8_t>(b, cd, M * K);
      const auto er = download<Backend, std::uint8_t>(b, rsc, rs.size()), ec = download<Backend, std::uint8_t>(b, csc, cs.size());
      for (const auto* q : {&qr, &qc}) {
        const auto& o = *q;
        CHECK(o[0] == 0x00);  // 1e-36 * 1 (the old 2^127 multiplier gave 0x73 in E4M3)
        CHECK(o[1] == 0x00);  // 5e-37 (0x6b)
        CHECK(o[K] == 0x00);
        CHECK(o[32] == 0x7F);       // inf * 0 = NaN (the old 2^-127 gave 0x7E, saturated)
        CHECK(o[K + 33] == 0x7F);   // -inf: NaN, sign dropped
        CHECK(o[33] == 0x00);       // 1 * 0
        CHECK(o[K + 32] == 0x00);
      }
      CHECK(er[0] == 0);
      CHECK(er[1] == 254);
      CHECK(ec[0] == 0);
      CHECK(ec[32] == 254);
      CHECK(ec[33] == 254);
      if (tile_2d) {
        CHECK(qr[2 * K + 34] == 0x80);  // -1 shares the inf's tile: -1 * 0 = -0
        CHECK(qc[2 * K + 34] == 0x80);
      } else {
        CHECK(er[rs.cols + 1] == 254);  // row 1's second block holds -inf
        CHECK(er[2 * rs.cols + 1] == tequant::encode_e8m0(1.0f / tequant::fp8_max(d)));  // -1 alone: ordinary
        CHECK(ec[34] == tequant::encode_e8m0(1.0f / tequant::fp8_max(d)));
        CHECK(qc[2 * K + 34] != 0x80);
      }
    }
  }
}

/// FP8 block scaling 1x128 / 128x128, partial edge tiles and exact 128 boundaries.
template <class T, class Backend>
void check_block(Backend& b, unsigned seed = 3) {
  std::mt19937 rng(seed);
  const std::size_t dims[] = {1, 4, 127, 128, 129, 256, 300};
  for (int iter = 0; iter < 20; ++iter) {
    const std::size_t M = dims[rng() % 7], K = dims[rng() % 7];
    const bool tile_2d = iter % 2 == 1, pow2 = iter % 4 < 2;
    const float eps = iter % 5 == 4 ? 1.0e-3f : 0.0f;
    const auto d = iter % 3 == 2 ? tequant::fp8_dtype::e5m2 : tequant::fp8_dtype::e4m3;
    CAPTURE(M);
    CAPTURE(K);
    CAPTURE(tile_2d);
    CAPTURE(pow2);
    const float magnitude = std::exp2(static_cast<float>(static_cast<int>(rng() % 60) - 30));
    const std::vector<T> xs = random_values<T>(rng, M * K, magnitude);
    const auto rs = tile_2d ? tequant::block_2d_rowwise_scale_shape(M, K) : tequant::block_1d_rowwise_scale_shape(M, K);
    const auto cs = tile_2d ? tequant::block_2d_columnwise_scale_shape(M, K) : tequant::block_1d_columnwise_scale_shape(M, K);
    auto x = upload(b, xs);
    auto rd = b.template make_buffer<std::uint8_t>(M * K), cd = b.template make_buffer<std::uint8_t>(M * K);
    auto rsc = upload(b, std::vector<float>(rs.size(), -7.0f)), csc = upload(b, std::vector<float>(cs.size(), -7.0f));
    b.quantize_block(tequant::matrix_view<const T>{x.data(), M, K}, d, tile_2d, pow2, eps,
                     tequant::block_output{{rd.data(), M * K}, {rsc.data(), rs.size()}, {cd.data(), M * K}, {csc.data(), cs.size()}});
    const auto qr = download<Backend, std::uint8_t>(b, rd, M * K), qc = download<Backend, std::uint8_t>(b, cd, M * K);
    const auto sr = download<Backend, float>(b, rsc, rs.size()), sc = download<Backend, float>(b, csc, cs.size());
    auto tile_scale = [&](std::size_t m0, std::size_t k0, std::size_t h, std::size_t w) {
      float a = 0.0f;
      for (std::size_t m = m0; m < std::min(M, m0 + h); ++m)
        for (std::size_t k = k0; k < std::min(K, k0 + w); ++k) a = std::fmax(a, std::fabs(ref::widen(xs[m * K + k])));
      return ref::scale_from_amax(a, tequant::fp8_max(d), pow2, eps, ref::input_max<T>());
    };
    // scale_inv is 1/s evaluated in double and rounded (TE's 1x128 kernel), which must equal fp32 1/s.
    auto inv = [](float s) { return static_cast<float>(1.0 / static_cast<double>(s)); };
    std::size_t bad = 0;
    for (std::size_t r = 0; r < rs.rows; ++r)
      for (std::size_t c = 0; c < rs.cols; ++c) {
        float want = 0.0f;
        if (tile_2d && r * 128 < M && c * 128 < K) want = inv(tile_scale(r * 128, c * 128, 128, 128));
        if (!tile_2d && r * 128 < K && c < M) want = inv(tile_scale(c, r * 128, 1, 128));
        bad += !same_bits(sr[r * rs.cols + c], want);
      }
    for (std::size_t r = 0; r < cs.rows; ++r)
      for (std::size_t c = 0; c < cs.cols; ++c) {
        float want = 0.0f;
        if (tile_2d && r * 128 < K && c * 128 < M) want = inv(tile_scale(c * 128, r * 128, 128, 128));
        if (!tile_2d && r * 128 < M && c < K) want = inv(tile_scale(r * 128, c, 128, 1));
        bad += !same_bits(sc[r * cs.cols + c], want);
      }
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k = 0; k < K; ++k) {
        const float v = ref::widen(xs[m * K + k]);
        const float s_row = tile_2d ? tile_scale(m / 128 * 128, k / 128 * 128, 128, 128) : tile_scale(m, k / 128 * 128, 1, 128);
        const float s_col = tile_2d ? s_row : tile_scale(m / 128 * 128, k, 128, 1);
        bad += qr[m * K + k] != ref::encode(d, v * s_row);
        bad += qc[k * M + m] != ref::encode(d, v * s_col);  // columnwise data is transposed
      }
    CHECK(bad == 0);
  }
}

/// Long rows whose blocks all have different magnitudes (so every block gets its own scale; a scale
/// applied to the wrong block shows), with few special values: MXFP8 1x32 and block 1x128 rowwise.
/// The vector paths handle eight blocks at a time, so the widths cover whole groups plus tails.
template <class T, class Backend>
void check_wide_rows(Backend& b, unsigned seed = 4) {
  std::mt19937 rng(seed);
  auto values = [&](std::size_t M, std::size_t K, std::size_t block) {
    std::vector<T> v(M * K);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k0 = 0; k0 < K; k0 += block) {
        const float magnitude = std::exp2(static_cast<float>(static_cast<int>(rng() % 50) - 25));
        for (std::size_t k = k0; k < std::min(K, k0 + block); ++k)
          v[m * K + k] = from_float<T>(rng() % 64 == 0 ? edge_value(rng, magnitude) : u(rng) * magnitude);
      }
    return v;
  };
  for (const std::size_t K : {std::size_t{256}, std::size_t{608}, std::size_t{1024}}) {
    for (const tequant::fp8_dtype d : {tequant::fp8_dtype::e4m3, tequant::fp8_dtype::e5m2}) {
      const std::size_t M = 32;
      CAPTURE(K);
      const std::vector<T> xs = values(M, K, 32);
      const auto rs = tequant::mxfp8_rowwise_scale_shape(M, K);
      auto x = upload(b, xs);
      auto rd = b.template make_buffer<std::uint8_t>(M * K);
      auto rsc = upload(b, std::vector<std::uint8_t>(rs.size(), 0xAB));
      b.quantize_mxfp8(tequant::matrix_view<const T>{x.data(), M, K}, d, false,
                       tequant::mxfp8_output{{rd.data(), M * K}, {rsc.data(), rs.size()}, {}, {}});
      const auto qr = download<Backend, std::uint8_t>(b, rd, M * K);
      const auto er = download<Backend, std::uint8_t>(b, rsc, rs.size());
      std::size_t bad = 0;
      for (std::size_t m = 0; m < M; ++m)
        for (std::size_t kb = 0; kb < K / 32; ++kb) {
          float a = 0.0f;
          for (std::size_t k = kb * 32; k < kb * 32 + 32; ++k) a = std::fmax(a, std::fabs(ref::widen(xs[m * K + k])));
          const std::uint8_t e = ref::e8m0(a * (1.0f / tequant::fp8_max(d)));
          bad += er[m * rs.cols + kb] != e;
          for (std::size_t k = kb * 32; k < kb * 32 + 32; ++k)
            bad += qr[m * K + k] != ref::encode(d, ref::widen(xs[m * K + k]) * ref::e8m0_mult(e));
        }
      CHECK(bad == 0);
    }
  }
  for (const std::size_t K : {std::size_t{1024}, std::size_t{2181}}) {
    for (int variant = 0; variant < 4; ++variant) {
      const std::size_t M = 3;
      const bool pow2 = variant % 2 == 0;
      const float eps = variant == 3 ? 1.0e-3f : 0.0f;
      const auto d = variant == 2 ? tequant::fp8_dtype::e5m2 : tequant::fp8_dtype::e4m3;
      CAPTURE(K);
      CAPTURE(variant);
      const std::vector<T> xs = values(M, K, 128);
      const auto rs = tequant::block_1d_rowwise_scale_shape(M, K);
      auto x = upload(b, xs);
      auto rd = b.template make_buffer<std::uint8_t>(M * K);
      auto rsc = upload(b, std::vector<float>(rs.size(), -7.0f));
      b.quantize_block(tequant::matrix_view<const T>{x.data(), M, K}, d, false, pow2, eps,
                       tequant::block_output{{rd.data(), M * K}, {rsc.data(), rs.size()}, {}, {}});
      const auto qr = download<Backend, std::uint8_t>(b, rd, M * K);
      const auto sr = download<Backend, float>(b, rsc, rs.size());
      std::size_t bad = 0;
      for (std::size_t r = 0; r < rs.rows; ++r)
        for (std::size_t c = 0; c < rs.cols; ++c) {
          if (r * 128 >= K || c >= M) {
            bad += !same_bits(sr[r * rs.cols + c], 0.0f);
            continue;
          }
          float a = 0.0f;
          for (std::size_t k = r * 128; k < std::min(K, r * 128 + 128); ++k) a = std::fmax(a, std::fabs(ref::widen(xs[c * K + k])));
          const float s = ref::scale_from_amax(a, tequant::fp8_max(d), pow2, eps, ref::input_max<T>());
          bad += !same_bits(sr[r * rs.cols + c], static_cast<float>(1.0 / static_cast<double>(s)));
          for (std::size_t k = r * 128; k < std::min(K, r * 128 + 128); ++k)
            bad += qr[c * K + k] != ref::encode(d, ref::widen(xs[c * K + k]) * s);
        }
      CHECK(bad == 0);
    }
  }
}

/// Wrong shapes and sizes raise tequant::error naming the tensor and the rule.
template <class Backend>
void check_shape_errors(Backend& b) {
  auto x = b.template make_buffer<float>(64 * 48);
  auto q = b.template make_buffer<std::uint8_t>(64 * 48);
  auto s8 = b.template make_buffer<std::uint8_t>(4096);
  auto sf = b.template make_buffer<float>(4096);
  CHECK_THROWS_WITH_AS(b.quantize_mxfp8(tequant::matrix_view<const float>{x.data(), 64, 48}, tequant::fp8_dtype::e4m3, false,
                                        tequant::mxfp8_output{{q.data(), 64 * 48}, {s8.data(), 512}, {}, {}}),
                       doctest::Contains("tequant: quantize_mxfp8: input has 48 columns"), tequant::error);
  CHECK_THROWS_WITH_AS(b.quantize_mxfp8(tequant::matrix_view<const float>{x.data(), 48, 64}, tequant::fp8_dtype::e4m3, false,
                                        tequant::mxfp8_output{{q.data(), 64 * 48}, {s8.data(), 512}, {}, {}}),
                       doctest::Contains("multiple of 32"), tequant::error);
  CHECK_THROWS_WITH_AS(b.quantize_mxfp8(tequant::matrix_view<const float>{x.data(), 32, 64}, tequant::fp8_dtype::e4m3, false,
                                        tequant::mxfp8_output{{q.data(), 32 * 64}, {s8.data(), 100}, {}, {}}),
                       doctest::Contains("rowwise_scale has 100 elements, expected 512"), tequant::error);
  CHECK_THROWS_WITH_AS(b.quantize_block(tequant::matrix_view<const float>{x.data(), 64, 48}, tequant::fp8_dtype::e4m3, false, true,
                                        0.0f, tequant::block_output{{q.data(), 10}, {sf.data(), 64}, {}, {}}),
                       doctest::Contains("quantize_block: rowwise_data has 10 elements"), tequant::error);
  CHECK_THROWS_WITH_AS(b.quantize_block(tequant::matrix_view<const float>{x.data(), 64, 48}, tequant::fp8_dtype::e4m3, true, true,
                                        0.0f, tequant::block_output{{}, {}, {q.data(), 64 * 48}, {sf.data(), 3}}),
                       doctest::Contains("columnwise_scale_inv has 3 elements, expected 4"), tequant::error);
  CHECK_THROWS_AS(b.quantize_block(tequant::matrix_view<const float>{x.data(), 64, 48}, tequant::fp8_dtype::e4m3, true, true, 0.0f,
                                   tequant::block_output{}),
                  tequant::error);
}

}  // namespace backend_suite
