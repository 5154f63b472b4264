// SPDX-License-Identifier: Apache-2.0
// An independent reference of TE's NVFP4 rule, written from its definition rather than from the
// library's encoders: E4M3 and E2M1 by nearest-value search over the representable values (ties to the
// even code), saturation by clamping, amaxes by std::fmax. Slow and obvious on purpose.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace nvfp4_reference {

/// Value of a positive E4M3 code 0..126 (exponent bias 7, subnormals at exponent 0).
inline double e4m3_value(int c) {
  const int e = c >> 3, m = c & 7;
  return e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
}

/// Round-to-nearest-even search over a table of increasing magnitudes (codes 0..n-1); saturating.
inline int nearest_code(double a, const double* values, int n) {
  if (a >= values[n - 1]) return n - 1;
  int best = 0;
  for (int c = 1; c < n; ++c) {
    const double d = std::fabs(values[c] - a), db = std::fabs(values[best] - a);
    if (d < db || (d == db && (c % 2) == 0)) best = c;
  }
  return best;
}

inline std::uint8_t e4m3(float v) {  // v >= 0 and not NaN here
  static const std::vector<double> table = [] {
    std::vector<double> t(127);
    for (int c = 0; c < 127; ++c) t[static_cast<std::size_t>(c)] = e4m3_value(c);
    return t;
  }();
  return static_cast<std::uint8_t>(nearest_code(static_cast<double>(v), table.data(), 127));
}

inline std::uint8_t e2m1(float v) {
  static const double table[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
  if (std::isnan(v)) return 0x7;
  const std::uint8_t sign = std::signbit(v) ? 0x8 : 0x0;
  return static_cast<std::uint8_t>(sign | nearest_code(std::fabs(static_cast<double>(v)), table, 8));
}

inline float e2m1_value(std::uint8_t c) {
  static const float table[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
  return (c & 8) ? -table[c & 7] : table[c & 7];
}

/// TE's compute_global_encode_scaling_factor_FP4.
inline float global_encode_scale(float amax) {
  const float fmax = std::numeric_limits<float>::max();
  float s = std::fmin(448.0f * 6.0f / amax, fmax);
  if (amax == 0.0f || s == 0.0f) return 1.0f;
  return s;
}

/// One direction of an NVFP4 cast of x [M, K] in plain index arithmetic: codes (one per element, in the
/// direction's order: [M, K] rowwise, [K, M] columnwise) and the E4M3 block scales per (line, block).
struct result {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint8_t> scales;  // [lines][blocks]
  std::size_t blocks = 0;
  float global_decode = 0.0f;
};

inline result cast(const std::vector<float>& x, std::size_t M, std::size_t K, bool columnwise, bool tile_2d) {
  float amax = 0.0f;
  for (float v : x) amax = std::fmax(amax, std::fabs(v));  // fmax ignores NaN
  const float s_enc = global_encode_scale(amax);
  const float s_dec = 1.0f / s_enc;
  const float inv6 = 1.0f / 6.0f;
  const std::size_t lines = columnwise ? K : M, len = columnwise ? M : K;
  const auto at = [&](std::size_t line, std::size_t i) { return columnwise ? x[i * K + line] : x[line * K + i]; };
  result r;
  r.blocks = (len + 15) / 16;
  r.codes.resize(M * K);
  r.scales.resize(lines * r.blocks);
  r.global_decode = s_dec;
  for (std::size_t l = 0; l < lines; ++l)
    for (std::size_t b = 0; b < r.blocks; ++b) {
      float bamax = 0.0f;
      if (tile_2d) {  // the 16x16 tile holding this block
        const std::size_t l0 = l / 16 * 16, l1 = std::min(lines, l0 + 16);
        for (std::size_t ll = l0; ll < l1; ++ll)
          for (std::size_t i = b * 16; i < std::min(len, b * 16 + 16); ++i) bamax = std::fmax(bamax, std::fabs(at(ll, i)));
      } else {
        for (std::size_t i = b * 16; i < std::min(len, b * 16 + 16); ++i) bamax = std::fmax(bamax, std::fabs(at(l, i)));
      }
      const std::uint8_t sc = e4m3(bamax * (s_enc * inv6));
      r.scales[l * r.blocks + b] = sc;
      const float mult = std::fmin(1.0f / (static_cast<float>(e4m3_value(sc)) * s_dec), std::numeric_limits<float>::max());
      for (std::size_t i = b * 16; i < std::min(len, b * 16 + 16); ++i) r.codes[l * len + i] = e2m1(at(l, i) * mult);
    }
  return r;
}

}  // namespace nvfp4_reference
