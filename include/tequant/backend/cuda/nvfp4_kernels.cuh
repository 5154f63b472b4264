// SPDX-License-Identifier: Apache-2.0
// NVFP4 kernels: one thread per 16-element block (or 16x16 tile), each running the __host__ __device__
// block function of detail/nvfp4_blocks.hpp that a host test checks against host_backend. The tensor's
// amax comes from the per-tensor amax kernel (tensor_kernels.cuh) before these run; every thread derives
// S_enc and S_dec from it with the host's functions. The random Hadamard transform of the columnwise
// copy runs one 16-row group per thread through detail/nvfp4_rht_blocks.hpp, the functions host_backend's
// RHT cast calls: an amax pass over the transformed values, then the cast, which transforms again
// (cheaper than a scratch copy of the tensor). Plain rather than fast: correctness first.
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/nvfp4_kernels.cuh> needs a CUDA compiler (nvcc); host code includes the .hpp headers"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tequant/detail/nvfp4_blocks.hpp"
#include "tequant/detail/nvfp4_rht_blocks.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/hadamard.hpp"

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

/// Transformed 16-row groups (= columnwise blocks) of a cast: (rows / 16) * cols; rows a multiple of 16.
TEQUANT_HD constexpr std::size_t nvfp4_rht_groups(const nvfp4_cast_args& a) noexcept {
  return a.rows / hadamard_size * a.cols;
}

/// The amax pass of the transformed columnwise copy: thread t takes column t % cols of group t / cols
/// (coalesced loads). Amax keys (sign-cleared bits, NaN ignored) reduced by a warp shuffle, then one
/// atomicMax a warp into *amax_key, which starts at 0 (+0.0f).
template <class T>
__global__ void __launch_bounds__(nvfp4_threads) nvfp4_rht_amax_kernel(nvfp4_cast_args a, unsigned* amax_key) {
  unsigned m = 0;
  for (std::size_t t = grid_first(); t < nvfp4_rht_groups(a); t += grid_stride()) {
    const unsigned k = float_bits(nvfp4_rht_group_amax<T>(a, t % a.cols, t / a.cols));
    m = k > m ? k : m;
  }
  for (unsigned lane = 16; lane > 0; lane /= 2) {
    const unsigned o = __shfl_down_sync(0xFFFFFFFFu, m, lane);
    m = o > m ? o : m;
  }
  if ((threadIdx.x & 31u) == 0) atomicMax(amax_key, m);
}

/// The transformed columnwise cast: thread t does block (column t % cols, group t / cols) with the
/// scales of the transformed amax; thread 0 also writes the columnwise global decode scale.
template <class T>
__global__ void __launch_bounds__(nvfp4_threads)
    nvfp4_rht_columnwise_kernel(nvfp4_cast_args a, const unsigned* amax_key, float* global_scale_inv) {
  const nvfp4_tensor_scales s = nvfp4_scales_from_amax(bits_float(*amax_key));
  if (blockIdx.x == 0 && threadIdx.x == 0) *global_scale_inv = s.decode;
  for (std::size_t t = grid_first(); t < nvfp4_rht_groups(a); t += grid_stride()) {
    nvfp4_rht_columnwise_block<T>(a, s, t % a.cols, t / a.cols);
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

template <int = 0>  // a template: several CUDA translation units of one program may include it
__global__ void __launch_bounds__(nvfp4_threads) nvfp4_dequantize_kernel(nvfp4_dequantize_args a) {
  const float g = *a.global_scale_inv;
  for (std::size_t i = grid_first(); i < a.rows * a.cols; i += grid_stride()) {
    a.out[i] =
        nvfp4_dequantize_element(a.q, a.rows, a.cols, a.columnwise, a.scale, a.scale_cols, g, i / a.cols, i % a.cols);
  }
}

/// The inverse transform of a dequantized columnwise copy out [rows, cols] (rows a multiple of 16), in
/// place: thread t undoes column t % cols of group t / cols.
template <int = 0>  // a template: several CUDA translation units of one program may include it
__global__ void __launch_bounds__(nvfp4_threads) nvfp4_rht_inverse_kernel(float* out, std::size_t rows, std::size_t cols) {
  for (std::size_t t = grid_first(); t < rows / hadamard_size * cols; t += grid_stride()) {
    nvfp4_rht_inverse_group(out, cols, t % cols, t / cols);
  }
}

}  // namespace tequant::detail
