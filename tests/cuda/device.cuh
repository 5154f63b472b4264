// SPDX-License-Identifier: Apache-2.0
// Device availability for the CUDA tests: every device test case is decorated with
// `* doctest::skip(no_device())`, so a machine without a GPU reports the cases as skipped.
#pragma once
#include "tequant/backend/cuda/check.cuh"

namespace cuda_test {

/// Queried once per process: decorators run during static initialisation of each test case.
inline bool no_device() {
  static const bool none = tequant::cuda_device_count() == 0;
  return none;
}

}  // namespace cuda_test
