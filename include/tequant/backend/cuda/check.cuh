// SPDX-License-Identifier: Apache-2.0
// The one place where CUDA runtime results become tequant::error.
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/check.cuh> needs a CUDA compiler (nvcc); host code includes the .hpp headers"
#endif

#include <cuda_runtime.h>

#include "tequant/error.hpp"

namespace tequant {
namespace detail {

/// Throws tequant::error naming the operation and CUDA's own message when `result` is not success.
inline void check(cudaError_t result, const char* operation) {
  if (result != cudaSuccess) [[unlikely]] {
    // Clear the non-sticky error so that the next, unrelated call does not report it a second time.
    (void)cudaGetLastError();
    fail("CUDA error in ", operation, ": ", cudaGetErrorName(result), " (", cudaGetErrorString(result), ")");
  }
}

/// Reports a failed kernel launch (bad configuration, no device) at the launch site.
inline void check_launch(const char* kernel) { check(cudaPeekAtLastError(), kernel); }

}  // namespace detail

/// Number of usable CUDA devices; 0 when there is no driver or no device. Never throws, so tests can
/// call it from doctest decorators.
inline int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return n;
}

}  // namespace tequant
