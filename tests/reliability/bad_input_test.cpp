// SPDX-License-Identifier: Apache-2.0
// Bad numeric input through every host quantizer and the delayed update: NaN, +-inf, denormals,
// all-zero and empty tensors. These tests are the reference for docs/numerics.md (see
// docs/reliability.md): each CHECK states one documented behaviour.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <vector>

#include "check_error.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e8m0.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/scale.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

using tequant::fp8_dtype;
const float nan_ = std::numeric_limits<float>::quiet_NaN();
const float inf_ = std::numeric_limits<float>::infinity();
const float den = tequant::detail::bits_float(0x00000400u);  // a float denormal (~1.4e-42)
const float max_ = tequant::detail::float_max;

bool is_nan_code(fp8_dtype d, std::uint8_t q) { return tequant::detail::is_nan(tequant::decode_fp8(d, q)); }
std::uint32_t bits(float f) { return tequant::detail::float_bits(f); }

}  // namespace

TEST_CASE("per-tensor cast: NaN stays NaN, inf saturates, denormals flush to +-0, amax ignores NaN") {
  const tequant::host_backend be;
  for (const fp8_dtype d : {fp8_dtype::e4m3, fp8_dtype::e5m2}) {
    CAPTURE(static_cast<int>(d));
    const std::vector<float> x = {nan_, -nan_, inf_, -inf_, den, -den, 0.0f, -0.0f, 1.0f};
    std::vector<std::uint8_t> q(x.size());
    const float scale = 1.0f;
    float scale_inv = 0, amax = 0;
    be.quantize_tensor(x.data(), x.size(), &scale, d, q.data(), &scale_inv, &amax);
    CHECK(is_nan_code(d, q[0]));
    CHECK(is_nan_code(d, q[1]));
    CHECK(tequant::decode_fp8(d, q[2]) == tequant::fp8_max(d));
    CHECK(tequant::decode_fp8(d, q[3]) == -tequant::fp8_max(d));
    for (std::size_t i = 4; i < 8; ++i) CHECK(tequant::decode_fp8(d, q[i]) == 0.0f);
    CHECK(bits(tequant::decode_fp8(d, q[5])) == 0x80000000u);  // the sign survives the flush
    CHECK(tequant::decode_fp8(d, q[8]) == 1.0f);
    CHECK(amax == inf_);
    CHECK(scale_inv == 1.0f);

    // amax max-accumulates and ignores NaN; denormals count.
    const std::vector<float> y = {nan_, -den, nan_};
    float a = 0;
    be.quantize_tensor(y.data(), y.size(), &scale, d, q.data(), nullptr, &a);
    CHECK(bits(a) == bits(den));
    const std::vector<float> all_nan = {nan_, nan_};
    a = 0.5f;
    be.quantize_tensor(all_nan.data(), all_nan.size(), &scale, d, q.data(), nullptr, &a);
    CHECK(a == 0.5f);
    // Empty tensor: nothing is read or written, the amax is unchanged.
    a = 0.25f;
    be.quantize_tensor(static_cast<const float*>(nullptr), 0, &scale, d, nullptr, &scale_inv, &a);
    CHECK(a == 0.25f);
    float am = -1;
    be.amax(static_cast<const float*>(nullptr), 0, &am);
    CHECK(am == 0.0f);
    be.amax(all_nan.data(), all_nan.size(), &am);
    CHECK(am == 0.0f);
    // A huge scale times a finite input saturates, never produces inf or NaN.
    const float big_scale = max_;
    be.quantize_tensor(x.data() + 8, 1, &big_scale, d, q.data(), nullptr, nullptr);
    CHECK(tequant::decode_fp8(d, q[0]) == tequant::fp8_max(d));
  }
}

TEST_CASE("current scaling: amax 0, inf or NaN-only gives scale 1; denormal amax gives FLT_MAX (pow2: 2^127)") {
  const tequant::host_backend be;
  const fp8_dtype d = fp8_dtype::e4m3;
  // quantize_current reports scale_inv = 1 / scale.
  auto scale_inv_of = [&](std::vector<float> x, bool pow2) {
    std::vector<std::uint8_t> q(x.size());
    float si = 0, a = 0;
    be.quantize_current(x.data(), x.size(), d, pow2, 0.0f, q.data(), &si, &a);
    return si;
  };
  CHECK(scale_inv_of({0.0f, -0.0f}, false) == 1.0f);
  CHECK(scale_inv_of({}, false) == 1.0f);
  CHECK(scale_inv_of({nan_, nan_}, false) == 1.0f);
  CHECK(scale_inv_of({1.0f, inf_}, false) == 1.0f);
  CHECK(scale_inv_of({den}, false) == 1.0f / max_);
  CHECK(scale_inv_of({den}, true) == 1.0f / tequant::detail::bits_float(0x7F000000u));  // 2^127
  CHECK(scale_inv_of({nan_, 2.0f}, false) == 1.0f / (448.0f / 2.0f));
  // amax_epsilon floors a zero or denormal amax.
  std::vector<float> z = {0.0f, den};
  std::vector<std::uint8_t> q(2);
  float si = 0;
  be.quantize_current(z.data(), z.size(), d, false, 1.0f, q.data(), &si);
  CHECK(si == 1.0f / 448.0f);
}

TEST_CASE("MXFP8: per 1x32 block the E8M0 scale comes from the NaN-ignoring amax; inf -> 254 and NaN; empty is an error") {
  const tequant::host_backend be;
  const fp8_dtype d = fp8_dtype::e4m3;
  constexpr std::size_t M = 32, K = 128;
  std::vector<float> x(M * K, 0.0f);  // row 0: block 0 all zero, block 1 NaN+1, block 2 inf, block 3 denormals
  x[32] = nan_;
  x[33] = 1.0f;
  x[64] = inf_;
  x[65] = 3.0f;
  for (std::size_t i = 96; i < 128; ++i) x[i] = den;
  for (std::size_t i = 32; i < 64; ++i) x[K + i] = nan_;  // row 1, block 1: all NaN
  const auto rs = tequant::mxfp8_rowwise_scale_shape(M, K), cs = tequant::mxfp8_columnwise_scale_shape(M, K);
  std::vector<std::uint8_t> rd(M * K), rsc(rs.size()), cd(M * K), csc(cs.size());
  be.quantize_mxfp8(tequant::matrix_view<const float>{x.data(), M, K}, d, false, {rd, rsc, cd, csc});
  CHECK(rsc[0] == 0);                                         // all zero: e = 0
  CHECK(rsc[1] == tequant::encode_e8m0(1.0f / 448.0f));       // NaN ignored
  CHECK(is_nan_code(d, rd[32]));
  CHECK(tequant::decode_fp8(d, rd[33]) * tequant::decode_e8m0(rsc[1]) == 1.0f);
  CHECK(rsc[2] == 254);                                       // inf amax
  CHECK(rd[64] == 0x7F);                                      // inf * 0 (TE's flushed 2^-127): NaN
  CHECK(tequant::decode_fp8(d, rd[65]) == 0.0f);              // finite values underflow beside an inf
  CHECK(rsc[3] == 0);                                         // denormal block: code 0, multiplied by 1 (TE)...
  CHECK(tequant::decode_fp8(d, rd[96]) == 0.0f);              // ...so 2^-139 flushes to 0
  CHECK(rsc[rs.cols + 1] == 0);                               // all-NaN block: amax 0
  for (std::size_t i = 32; i < 64; ++i) CHECK(is_nan_code(d, rd[K + i]));
  for (std::size_t i = 0; i < M * K; ++i)
    if (!tequant::detail::is_nan(x[i]) && !tequant::detail::is_inf(x[i])) CHECK_FALSE(is_nan_code(d, cd[i]));  // inf * 0 is NaN
  // Empty input (M = 0): every output and scale tensor is empty; nothing is written, nothing thrown.
  CHECK_NOTHROW(be.quantize_mxfp8(tequant::matrix_view<const float>{nullptr, 0, K}, d, false, {}));
  CHECK_NOTHROW(be.quantize_mxfp8(tequant::matrix_view<const float>{nullptr, 0, K}, d, true, {}));
  // A non-empty input with no output requested is still misuse.
  CHECK_TEQUANT_ERROR(be.quantize_mxfp8(tequant::matrix_view<const float>{x.data(), M, K}, d, false, {}),
                      "neither rowwise_data nor columnwise_data requested");
}

TEST_CASE("FP8 block scaling: tile scale from NaN-ignoring amax; zero/inf amax -> 1; denormal -> input max") {
  const tequant::host_backend be;
  const fp8_dtype d = fp8_dtype::e4m3;
  constexpr std::size_t M = 4, K = 128 * 4;
  std::vector<float> x(M * K, 0.0f);  // row 0: tile 0 zero, tile 1 NaN+2, tile 2 inf, tile 3 denormal
  x[128] = nan_;
  x[129] = 2.0f;
  x[256] = -inf_;
  x[257] = 5.0f;
  x[384] = den;
  const auto rs = tequant::block_1d_rowwise_scale_shape(M, K);
  std::vector<std::uint8_t> rd(M * K);
  std::vector<float> rsi(rs.size());
  be.quantize_block(tequant::matrix_view<const float>{x.data(), M, K}, d, false, false, 0.0f, {rd, rsi, {}, {}});
  auto si = [&](std::size_t tile) { return rsi[tile * rs.cols + 0]; };
  CHECK(si(0) == 1.0f);
  CHECK(si(1) == 2.0f / 448.0f);
  CHECK(is_nan_code(d, rd[128]));
  CHECK(si(2) == 1.0f);                                   // inf amax: scale 1
  CHECK(tequant::decode_fp8(d, rd[256]) == -448.0f);
  CHECK(tequant::decode_fp8(d, rd[257]) == 5.0f);
  CHECK(si(3) == 1.0f / max_);                            // denormal amax: FLT_MAX (float input's max)
  CHECK(tequant::decode_fp8(d, rd[384]) == 0.0f);         // 2^-139 * FLT_MAX = 2^-11: below FP8's range
  // Empty input: nothing to do, for every tile shape; non-empty without outputs is misuse.
  for (const std::size_t k : {std::size_t{0}, std::size_t{200}}) {
    CHECK_NOTHROW(be.quantize_block(tequant::matrix_view<const float>{nullptr, 0, k}, d, false, true, 0.0f, {}));
    CHECK_NOTHROW(be.quantize_block(tequant::matrix_view<const float>{nullptr, 0, k}, d, true, true, 0.0f, {}));
  }
  CHECK_TEQUANT_ERROR(be.quantize_block(tequant::matrix_view<const float>{x.data(), M, K}, d, false, true, 0.0f, {}),
                      "neither rowwise_data nor columnwise_data requested");
}

TEST_CASE("delayed update: NaN never enters staging; inf keeps the old scale for L updates; zero is untouched") {
  using M = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::explicit_scope>;
  tequant::delayed_params p;
  p.history_length = 3;
  M m(p);
  const auto h = m.register_module("m");
  const auto s = m.slot(h, tequant::forward_role::input);
  auto& bk = m.recipe_state()[s.bucket];
  auto forward_update = [&] { auto r = m.autocast(); };

  bk.record_amax(s.index, nan_);
  CHECK(m.staging_amax(s) == 0.0f);
  forward_update();  // c == 0: untouched
  CHECK(m.scale(s) == 1.0f);
  std::vector<float> ring(3);
  auto te = [&] { bk.export_te_history(s.index, 1, ring); };

  bk.record_amax(s.index, 2.0f);
  forward_update();
  CHECK(m.scale(s) == 448.0f / 2.0f);
  bk.record_amax(s.index, inf_);
  forward_update();
  CHECK(m.scale(s) == 448.0f / 2.0f);  // window max inf: keep the old scale
  te();
  CHECK(ring[2] == inf_);
  bk.record_amax(s.index, 1.0f);
  forward_update();
  bk.record_amax(s.index, 1.0f);
  forward_update();
  CHECK(m.scale(s) == 448.0f / 2.0f);  // inf still in the window of 3
  bk.record_amax(s.index, 1.0f);
  forward_update();
  CHECK(m.scale(s) == 448.0f);  // inf left the window
  bk.record_amax(s.index, den);
  forward_update();
  CHECK(m.scale(s) == 448.0f);  // window max is still 1
  for (int i = 0; i < 3; ++i) {
    bk.record_amax(s.index, den);
    forward_update();
  }
  CHECK(m.scale(s) == max_);  // 448 / denormal overflows: FLT_MAX, never inf
  const auto st = m.stats();
  CHECK(st.forward_updates == 10);
  // An empty tensor cast records nothing.
  const tequant::host_backend be;
  const auto plan = m.plan_cast(s);
  be.quantize_tensor(static_cast<const float*>(nullptr), 0, plan.scale, plan.dtype, nullptr, nullptr, plan.amax);
  CHECK(m.staging_amax(s) == 0.0f);
}
