// SPDX-License-Identifier: Apache-2.0
// The host quantize kernels, compiled once: include this header in exactly one translation unit of a
// program whose other translation units define TEQUANT_SEPARATE_HOST_KERNELS (they then see only the
// kernels' declarations, detail/host_kernels.hpp, and skip parsing and generating the SIMD code). It
// instantiates every kernel for every input type (fp32, bf16, fp16) and FP8 dtype host_backend casts.
#pragma once
#include "tequant/detail/host_nvfp4.hpp"
#include "tequant/detail/host_nvfp4_rht.hpp"
#include "tequant/detail/host_simd.hpp"
#include "tequant/format/half.hpp"

#define TEQUANT_DETAIL_INSTANTIATE_FOR_INPUT(T)                                                                        \
  template float amax_host<T>(const T*, std::size_t) noexcept;                                                          \
  template void column_amax_host<T>(const T*, std::size_t, std::uint32_t*) noexcept;                                    \
  template void quantize_nvfp4_host<T>(matrix_view<const T>, const nvfp4_options&, const nvfp4_output&, bool, bool,     \
                                       scale_shape, scale_shape);                                                       \
  template void quantize_nvfp4_rht_host<T>(matrix_view<const T>, const nvfp4_options&, const nvfp4_output&, bool,      \
                                           bool, scale_shape, scale_shape);                                             \
  TEQUANT_DETAIL_INSTANTIATE_FOR_DTYPE(fp8_dtype::e4m3, T)                                                             \
  TEQUANT_DETAIL_INSTANTIATE_FOR_DTYPE(fp8_dtype::e5m2, T)

#define TEQUANT_DETAIL_INSTANTIATE_FOR_DTYPE(D, T)                                                                     \
  template void scale_encode_host<D, T>(const T*, std::size_t, float, std::uint8_t*, std::uint32_t*) noexcept;          \
  template void scale_encode_each_host<D, T>(const T*, std::size_t, const float*, std::uint8_t*) noexcept;              \
  template void mxfp8_rowwise_host<D, T>(const T*, std::size_t, std::size_t, std::uint8_t*, std::uint8_t*,              \
                                         std::size_t, bool) noexcept;                                                   \
  template void mxfp8_columnwise_host<D, T>(const T*, std::size_t, std::size_t, std::uint8_t*, std::uint8_t*,           \
                                            std::size_t, bool) noexcept;                                                \
  template void block_rowwise_host<D, T>(const T*, std::size_t, std::size_t, std::uint8_t*, float*, std::size_t, bool,  \
                                         float, float, bool) noexcept;                                                  \
  template void block_2d_host<D, T>(const T*, std::size_t, std::size_t, std::uint8_t*, float*, bool, float, float,      \
                                    bool) noexcept;

namespace tequant::detail {
TEQUANT_DETAIL_INSTANTIATE_FOR_INPUT(float)
TEQUANT_DETAIL_INSTANTIATE_FOR_INPUT(bf16)
TEQUANT_DETAIL_INSTANTIATE_FOR_INPUT(fp16)
}  // namespace tequant::detail

#undef TEQUANT_DETAIL_INSTANTIATE_FOR_INPUT
#undef TEQUANT_DETAIL_INSTANTIATE_FOR_DTYPE
