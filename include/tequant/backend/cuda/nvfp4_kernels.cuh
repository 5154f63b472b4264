// SPDX-License-Identifier: Apache-2.0
// NVFP4 kernels: one thread per 16-element block (or 16x16 tile), each running the __host__ __device__
// block function of detail/nvfp4_blocks.hpp that a host test checks against host_backend. The tensor's
// amax comes from the per-tensor amax kernel (tensor_kernels.cuh) before these run; every thread derives
// S_enc and S_dec from it with the host's functions. Plain rather than fast: correctness first.
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/nvfp4_kernels.cuh> needs a CUDA compiler (nvcc); host code includes the .hpp headers"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tequant/detail/nvfp4_blocks.hpp"

namespace tequant::detail {

inline constexpr int nvfp4_threads = 256;

/// Grid-stride loop bounds: this thread's first item and the stride.
__device__ __forceinline__ std::size_t grid_first() {
  return static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::size_t grid_stride() { return static_cast<std::size_t>(gridDim.x) * blockDim.x; }

/// 16x16 tile codes (2D blocks), shared by both directions: thread t does tile (t / tile cols, t % tile cols).
template <class T>
__global__ void __launch_bounds__(nvfp4_threads) nvfp4_tile_kernel(nvfp4_cast_args a, const float* amax) {
  const float s_enc = nvfp4_scales_from_amax(*amax).encode;
  const std::size_t KB = nvfp4_tile_cols(a), MB = (a.rows + nvfp4_block - 1) / nvfp4_block;
  for (std::size_t t = grid_first(); t < MB * KB; t += grid_stride()) {
    a.tile_scale[t] = nvfp4_tile_code<T>(a, s_enc, t / KB, t % KB);
  }
}

/// Rowwise blocks: thread t does block (t / blocks per row, t % blocks per row); thread 0 also writes the
/// global decode scale.
template <class T>
__global__ void __launch_bounds__(nvfp4_threads)
    nvfp4_rowwise_kernel(nvfp4_cast_args a, const float* amax, float* global_scale_inv) {
  const nvfp4_tensor_scales s = nvfp4_scales_from_amax(*amax);
  if (blockIdx.x == 0 && threadIdx.x == 0) *global_scale_inv = s.decode;
  const std::size_t KB = nvfp4_tile_cols(a);
  for (std::size_t t = grid_first(); t < a.rows * KB; t += grid_stride()) {
    nvfp4_rowwise_block<T>(a, s, t / KB, t % KB);
  }
}

/// Columnwise blocks: thread t does column k = t % cols of block row t / cols, so neighbouring threads
/// read neighbouring columns (coalesced loads).
template <class T>
__global__ void __launch_bounds__(nvfp4_threads)
    nvfp4_columnwise_kernel(nvfp4_cast_args a, const float* amax, float* global_scale_inv) {
  const nvfp4_tensor_scales s = nvfp4_scales_from_amax(*amax);
  if (blockIdx.x == 0 && threadIdx.x == 0) *global_scale_inv = s.decode;
  const std::size_t MB = (a.rows + nvfp4_block - 1) / nvfp4_block;
  for (std::size_t t = grid_first(); t < MB * a.cols; t += grid_stride()) {
    nvfp4_columnwise_block<T>(a, s, t % a.cols, t / a.cols);
  }
}

/// One direction of NVFP4 data decoded into out [rows, cols].
struct nvfp4_dequantize_args {
  const std::uint8_t* q;
  std::size_t rows, cols;
  bool columnwise;
  const std::uint8_t* scale;
  std::size_t scale_cols;
  const float* global_scale_inv;
  float* out;
};

__global__ void __launch_bounds__(nvfp4_threads) nvfp4_dequantize_kernel(nvfp4_dequantize_args a) {
  const float g = *a.global_scale_inv;
  for (std::size_t i = grid_first(); i < a.rows * a.cols; i += grid_stride()) {
    a.out[i] =
        nvfp4_dequantize_element(a.q, a.rows, a.cols, a.columnwise, a.scale, a.scale_cols, g, i / a.cols, i % a.cols);
  }
}

}  // namespace tequant::detail
