// SPDX-License-Identifier: Apache-2.0
// Test inputs for the NVFP4 tests: values over many magnitudes, with the cases a cast must get right.
#pragma once
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

namespace tq_test {

/// Random values over many magnitudes, with outliers, zeros, and optionally NaN and inf.
inline std::vector<float> random_tensor(std::size_t n, unsigned seed, bool specials) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 99), expo(-20, 20);
  std::vector<float> x(n);
  for (float& v : x) {
    const int k = pick(g);
    if (k < 5) v = 0.0f;
    else if (k < 7) v = -0.0f;
    else if (k < 9) v = nd(g) * 1e4f;  // outliers
    else v = std::ldexp(nd(g), expo(g) / 4);
  }
  if (specials && n > 8) {
    x[n / 3] = std::numeric_limits<float>::quiet_NaN();
    x[n / 2] = -std::numeric_limits<float>::quiet_NaN();
    x[n - 1] = std::numeric_limits<float>::infinity();
    x[n / 5] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

}  // namespace tq_test
