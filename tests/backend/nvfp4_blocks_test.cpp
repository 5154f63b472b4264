// SPDX-License-Identifier: Apache-2.0
// The CUDA NVFP4 kernels' per-block functions (detail/nvfp4_blocks.hpp, and nvfp4_rht_blocks.hpp's
// per-group functions of the random Hadamard transform), run on the host and compared byte for byte with
// host_backend: the code every kernel thread runs, checked on machines without a GPU.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "backend/nvfp4_cases.hpp"
#include "tequant/detail/nvfp4_blocks.hpp"
#include "tequant/detail/nvfp4_rht_blocks.hpp"
#include "tequant/format/hadamard.hpp"
#include "tequant/format/half.hpp"

TEST_CASE_TEMPLATE("nvfp4 blocks: the kernels' block functions equal host_backend byte for byte", T, float,
                   tequant::bf16, tequant::fp16) {
  nvfp4_cases::check_blocks_match_host<T>();
}

TEST_CASE("nvfp4 blocks: the block amax ignores NaN, counts -0 as 0 and lets infinity win") {
  using tequant::detail::nvfp4_strided_amax;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float a[] = {-0.0f, nan, -2.5f, 1.0f};
  CHECK(nvfp4_strided_amax(a, 4, 1) == 2.5f);
  CHECK(nvfp4_strided_amax(a, 2, 1) == 0.0f);
  CHECK(!std::signbit(nvfp4_strided_amax(a, 1, 1)));
  const float b[] = {1.0f, 7.0f, -inf, 9.0f};
  CHECK(nvfp4_strided_amax(b, 2, 2) == inf);  // elements 0 and 2
  CHECK(nvfp4_strided_amax(b, 2, 3) == 9.0f);  // elements 0 and 3
}

TEST_CASE("nvfp4 blocks: a stochastic cast's stream positions are the host's") {
  // Columnwise only still starts its stream after the rowwise one's groups, and the offset moves past
  // the last group drawn: the host's rule, which the kernels take from nvfp4_make_cast_args /
  // nvfp4_advance_stream.
  std::uint64_t offset = 100;
  const tequant::nvfp4_options opt{false, &offset, 7};
  std::uint8_t d[8], s[128 * 4];
  float g[1];
  const tequant::nvfp4_output col_only{{}, {}, {}, d, s, g};
  const auto a = tequant::detail::nvfp4_make_cast_args(nullptr, 4, 4, opt, col_only, {}, {128, 4});
  CHECK(a.stochastic);
  CHECK(a.row_first == 100);
  CHECK(a.col_first == 104);
  CHECK(a.row_data == nullptr);
  tequant::detail::nvfp4_advance_stream(a, opt);
  CHECK(offset == 108);
}

TEST_CASE("nvfp4 blocks: the RHT group functions (transform, NaN-propagating block amax, inverse)") {
  namespace d = tequant::detail;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // A column of x [16, 3] (stride 3) transforms as hadamard_column of the same 16 values, bf16 input too.
  float x[48];
  tequant::bf16 xb[48];
  for (int i = 0; i < 48; ++i) {
    x[i] = static_cast<float>((i * 37) % 23) - 11.5f;
    xb[i] = tequant::to_bf16(x[i]);
  }
  float col[16], y[16], yb[16];
  for (int r = 0; r < 16; ++r) col[r] = x[r * 3 + 1];
  d::nvfp4_rht_group(x + 1, 3, y);
  d::nvfp4_rht_group(xb + 1, 3, yb);
  for (std::uint32_t c = 0; c < 16; ++c) {
    CHECK(y[c] == tequant::hadamard_column(col, c));
    CHECK(yb[c] == y[c]);  // x's values are bf16-exact
    CHECK(tequant::to_float(tequant::to_bf16(y[c])) == y[c]);  // the transform's output is bf16
  }
  // The inverse (in place, on a column of [16, 3]) brings the group back to bf16 precision.
  float out[48] = {};
  for (int r = 0; r < 16; ++r) out[r * 3 + 1] = y[r];
  d::nvfp4_rht_inverse_group(out, 3, 1, 0);
  for (int r = 0; r < 16; ++r) CHECK(std::fabs(out[r * 3 + 1] - col[r]) <= 0.1f);  // ||error|| <= 2^-9 ||x|| < 0.1
  CHECK(out[0] == 0.0f);  // other columns untouched
  // The block amax propagates NaN (the fused kernel's rule), the tensor amax ignores it.
  float v[16] = {1.0f, -7.0f, 2.0f};
  CHECK(d::nan_propagating_amax(v, 16) == 7.0f);
  v[5] = nan;
  CHECK(std::isnan(d::nan_propagating_amax(v, 16)));
  CHECK(d::nvfp4_rht_block_scale(nan, 1.0f) == 0x7F);
  CHECK(std::isnan(d::nvfp4_rht_block_multiplier(0x7F, 1.0f)));
  v[5] = -inf;
  CHECK(d::nan_propagating_amax(v, 16) == inf);
  // The per-thread amax of a group holding a NaN ignores the NaN group values: a group of one NaN row is
  // all NaN after the transform, so its amax is 0.
  float g[32] = {};
  g[2 * 4] = nan;  // row 4 of column 0 in x [16, 2]
  std::uint64_t offset = 0;
  const tequant::nvfp4_options opt{false, &offset, 1, true};
  std::uint8_t data[16], scale[128 * 4];
  float gs[1];
  const tequant::nvfp4_output o{{}, {}, {}, data, scale, gs};
  const auto a = d::nvfp4_make_cast_args(g, 16, 2, opt, o, {}, {128, 4});
  CHECK(d::nvfp4_rht_group_amax<float>(a, 0, 0) == 0.0f);
  g[2 * 4 + 1] = -3.0f;  // column 1: one -3, so every transformed value is +-0.75
  CHECK(d::nvfp4_rht_group_amax<float>(a, 1, 0) == 0.75f);
}
