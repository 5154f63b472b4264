// SPDX-License-Identifier: Apache-2.0
// Device availability for the CUDA tests: every device test case is decorated with
// `* doctest::skip(no_device())`, so a machine without a GPU reports the cases as skipped.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>

namespace cuda_test {

/// Queried once per process: decorators run during static initialisation of each test case. Says why
/// on stderr, so that a GPU machine whose driver is older than the toolkit (every case skipped) shows
/// the reason in the test log instead of a silent skip.
inline bool no_device() {
  static const bool none = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      std::fprintf(stderr, "cuda tests: no usable CUDA device: %s (%s); device cases are skipped\n", cudaGetErrorName(e),
                   cudaGetErrorString(e));
      (void)cudaGetLastError();
    }
    return e != cudaSuccess || n == 0;
  }();
  return none;
}

}  // namespace cuda_test
