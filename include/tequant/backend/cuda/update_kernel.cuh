// SPDX-License-Identifier: Apache-2.0
// The delayed-scaling update of many buckets in one launch: one thread per slot, each running the
// same TEQUANT_HD delayed_update_slot as the host loop, on the ring layout (O(1) memory per slot).
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/update_kernel.cuh> needs a CUDA compiler (nvcc); host code includes the .hpp headers"
#endif

#include <cuda_runtime.h>

#include <cstdint>

#include "tequant/recipe/delayed_state.hpp"

namespace tequant::detail {

/// Buckets per launch. The views travel in the kernel's parameter space (about 9 KiB here, limit
/// 32 KiB since CUDA 12.1), so the launch needs no host-to-device copy and stays graph-capturable.
inline constexpr std::uint32_t update_max_buckets = 128;
inline constexpr int update_threads = 128;

struct delayed_update_batch {
  std::uint32_t buckets;
  std::uint32_t first_slot[update_max_buckets + 1];  // prefix sums of the bucket sizes
  delayed_bucket_view views[update_max_buckets];
  delayed_update_args args[update_max_buckets];
};

template <class Algo>
__global__ void __launch_bounds__(update_threads) delayed_update_kernel(const __grid_constant__ delayed_update_batch batch) {
  const std::uint32_t t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= batch.first_slot[batch.buckets]) return;
  std::uint32_t b = 0;  // few buckets per direction: a linear scan beats a search
  while (t >= batch.first_slot[b + 1]) ++b;
  const delayed_bucket_view& v = batch.views[b];
  const std::uint32_t j = t - batch.first_slot[b];
  delayed_update_slot(v, j, v.staging[j], Algo{}, batch.args[b]);
}

}  // namespace tequant::detail
