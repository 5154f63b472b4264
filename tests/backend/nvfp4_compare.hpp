// SPDX-License-Identifier: Apache-2.0
// One direction of a host NVFP4 cast against the independent reference (nvfp4_reference.hpp): codes,
// block scales in TE's padded layout, and the padding, counted as mismatches.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/nvfp4_reference.hpp"
#include "tequant/backend/layouts.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/detail/host_kernels.hpp"

namespace tq_test {

struct nvfp4_mismatches {
  std::size_t codes = 0, scales = 0, padding = 0;
};

inline nvfp4_mismatches count_nvfp4_mismatches(const tequant::quantized_output& o, const nvfp4_reference::result& ref,
                                               bool col, std::size_t M, std::size_t K) {
  const auto data = col ? o.columnwise_data : o.rowwise_data;
  const auto scale = col ? o.columnwise_block_scale : o.rowwise_block_scale;
  const tequant::scale_shape ss = col ? tequant::nvfp4_columnwise_scale_shape(M, K) : tequant::nvfp4_rowwise_scale_shape(M, K);
  nvfp4_mismatches bad;
  const std::size_t lines = col ? K : M;
  for (std::size_t e = 0; e < M * K; ++e) bad.codes += tequant::detail::get_nibble(data.data(), e) != ref.codes[e];
  for (std::size_t r = 0; r < ss.rows; ++r)
    for (std::size_t c = 0; c < ss.cols; ++c) {
      const std::uint8_t got = scale[r * ss.cols + c];
      if (r < lines && c < ref.blocks) bad.scales += got != ref.scales[r * ref.blocks + c];
      else bad.padding += got != 0;
    }
  return bad;
}

}  // namespace tq_test
