// SPDX-License-Identifier: Apache-2.0
// Host NVFP4 cast whose columnwise copy goes through TE's 16x16 random Hadamard transform
// (format/hadamard.hpp), and the inverse for its dequantize. The rowwise copy is the plain cast of
// host_nvfp4.hpp (its S_enc from the untransformed amax, as TE's pre-RHT amax). The columnwise copy
// follows TE's RHT-cast fusion kernel (hadamard_transform_cast_fusion.cu), the path TE takes for bf16:
// every 16 consecutive rows of a column transformed and rounded to bf16; S_enc from the amax of those
// values (NaN ignored, as the amax kernel's bf16 max); per block scale = e4m3((block_amax / 6) * S_enc)
// (the fused kernel divides, where the plain kernel multiplies by S_enc * (1/6)), with a NaN in the
// block propagating into its amax (cutlass's NaN-propagating absolute-max reduction) and so into the
// scale (0x7F) and the multiplier. The per-group transform and the per-block scale and codes are the
// __host__ __device__ functions of detail/nvfp4_rht_blocks.hpp, which the CUDA kernels run too.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tequant/backend/layouts.hpp"
#include "tequant/backend/validate.hpp"
#include "tequant/detail/host_kernels.hpp"
#include "tequant/detail/host_nvfp4.hpp"
#include "tequant/detail/nvfp4_rht_blocks.hpp"
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e2m1.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/hadamard.hpp"
#include "tequant/format/nvfp4.hpp"

namespace tequant::detail {

/// x [M, K] transformed along its rows, transposed: t[k*M + m] (the columnwise layout), bf16-rounded
/// values widened to float. M is a multiple of 16.
template <class T>
std::vector<float> nvfp4_rht_columns(matrix_view<const T> x) {
  const std::size_t M = x.rows, K = x.cols;
  std::vector<float> t(M * K);
  for (std::size_t r0 = 0; r0 < M; r0 += hadamard_size)
    for (std::size_t k = 0; k < K; ++k) nvfp4_rht_group(x.data + r0 * K + k, K, t.data() + k * M + r0);
  return t;
}

/// The columnwise copy with the transform. Stochastic when `sr`: element e = k*M + m draws word e of
/// the stream (seed, first_group), the numbering of the untransformed columnwise copy.
template <class T>
void quantize_nvfp4_columnwise_rht_host(matrix_view<const T> x, const nvfp4_output& o, scale_shape cs, bool sr,
                                        std::uint64_t seed, std::uint64_t first_group) {
  const std::size_t M = x.rows, K = x.cols;
  const std::vector<float> t = nvfp4_rht_columns(x);
  const nvfp4_tensor_scales s = nvfp4_scales_from_amax(amax_host(t.data(), t.size()));
  std::memset(o.columnwise_scale.data(), 0, o.columnwise_scale.size());
  o.columnwise_global_scale_inv[0] = s.decode;
  nvfp4_random rnd(seed, first_group);
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t mb = 0; mb < M / nvfp4_block; ++mb) {
      const std::size_t e0 = k * M + mb * nvfp4_block;
      o.columnwise_scale[k * cs.cols + mb] =
          nvfp4_rht_encode_block(t.data() + e0, s, o.columnwise_data.data(), e0, sr ? &rnd : nullptr);
    }
}

/// quantize_nvfp4_host with the columnwise copy transformed: the rowwise copy as without the transform,
/// then the columnwise one from the stream position right after the rowwise stream, as untransformed.
template <class T>
void quantize_nvfp4_rht_host(matrix_view<const T> x, const nvfp4_options& opt, const nvfp4_output& o, bool row, bool col,
                             scale_shape rs, scale_shape cs) {
  if (col) check_nvfp4_rht("quantize_nvfp4", x.rows, opt.tile_2d);
  const bool sr = opt.rng_offset != nullptr;
  const std::uint64_t first = sr ? *opt.rng_offset : 0, groups = nvfp4_groups(x.rows * x.cols);
  if (row) quantize_nvfp4_host(x, opt, o, true, false, rs, cs);  // advances *rng_offset by `groups`
  if (col) quantize_nvfp4_columnwise_rht_host(x, o, cs, sr, opt.rng_seed, first + groups);
  if (sr) *opt.rng_offset = first + (col ? 2 * groups : groups);  // past the last group drawn, as without
}

}  // namespace tequant::detail
