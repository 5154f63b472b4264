// SPDX-License-Identifier: Apache-2.0
// Quantizes a few tensors with each FP8 element type and prints the round-trip error.
#include <tequant/tequant.hpp>

#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(4096);
  for (float& v : x) v = normal(rng) * 3.0f;

  float amax = 0.0f;
  for (float v : x) amax = tequant::detail::nan_ignoring_max(amax, std::fabs(v));

  std::printf("%-6s %12s %14s %14s\n", "dtype", "scale", "max |err|", "rel rms err");
  for (auto dtype : {tequant::fp8_dtype::e4m3, tequant::fp8_dtype::e5m2}) {
    // example-begin fp8_roundtrip
    const float scale = tequant::scale_from_amax(amax, tequant::fp8_max(dtype));
    const float scale_inv = tequant::scale_inverse(scale);
    double max_err = 0.0, se = 0.0, ss = 0.0;
    for (float v : x) {
      const float back = tequant::decode_fp8(dtype, tequant::encode_fp8(dtype, v * scale)) * scale_inv;
      max_err = std::fmax(max_err, std::fabs(back - v));
      se += double(back - v) * double(back - v);
      ss += double(v) * double(v);
    }
    // example-end
    std::printf("%-6s %12.4f %14.6f %14.6f\n", tequant::to_string(dtype), scale, max_err, std::sqrt(se / ss));
  }
  return 0;
}
