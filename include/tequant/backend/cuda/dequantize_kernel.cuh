// SPDX-License-Identifier: Apache-2.0
// Dequantization for every layout (tests, debugging, FP8 weight export): out [M, K] = decode(q) * scale.
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/dequantize_kernel.cuh> needs a CUDA compiler (nvcc); host code includes the .hpp headers"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tequant/format/e8m0.hpp"
#include "tequant/format/fp8.hpp"

namespace tequant::detail {

struct dequantize_args {
  enum layout : std::uint8_t { per_tensor, mxfp8_row, mxfp8_col, block1d_row, block1d_col, block2d_row, block2d_col };
  const std::uint8_t* q;
  float* out;
  std::size_t rows, cols;  // per_tensor: n x 1
  fp8_dtype dtype;
  layout kind;
  const void* scale;       // float scale_inv, or E8M0 bytes for MXFP8
  std::size_t scale_cols;  // row length of the padded scale tensor
  std::size_t unused;
};

/// Same index rules as host_backend::dequantize_*; columnwise block data is [K, M].
template <int = 0>  // a template: several CUDA translation units of one program may include it
__global__ void dequantize_kernel(dequantize_args a) {
  const std::size_t n = a.rows * a.cols;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t m = i / a.cols, k = i % a.cols;
    const auto* fs = static_cast<const float*>(a.scale);
    const auto* es = static_cast<const std::uint8_t*>(a.scale);
    const std::size_t sc = a.scale_cols;
    std::uint8_t b = a.q[i];
    float s = 1.0f;
    switch (a.kind) {
      case dequantize_args::per_tensor: s = fs[0]; break;
      case dequantize_args::mxfp8_row: s = decode_e8m0(es[m * sc + k / 32]); break;
      case dequantize_args::mxfp8_col: s = decode_e8m0(es[(m / 32) * sc + k]); break;
      case dequantize_args::block1d_row: s = fs[(k / 128) * sc + m]; break;
      case dequantize_args::block1d_col: s = fs[(m / 128) * sc + k]; b = a.q[k * a.rows + m]; break;
      case dequantize_args::block2d_row: s = fs[(m / 128) * sc + k / 128]; break;
      case dequantize_args::block2d_col: s = fs[(k / 128) * sc + m / 128]; b = a.q[k * a.rows + m]; break;
    }
    a.out[i] = decode_fp8(a.dtype, b) * s;
  }
}

}  // namespace tequant::detail
