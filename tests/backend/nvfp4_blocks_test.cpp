// SPDX-License-Identifier: Apache-2.0
// The CUDA NVFP4 kernels' per-block functions (detail/nvfp4_blocks.hpp), run on the host and compared
// byte for byte with host_backend: the code every kernel thread runs, checked on machines without a GPU.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>

#include "backend/nvfp4_cases.hpp"
#include "tequant/detail/nvfp4_blocks.hpp"
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
