// SPDX-License-Identifier: Apache-2.0
// An independent reference of TE's NVFP4 rule, written from its definition rather than from the
// library's encoders: E4M3 and E2M1 by nearest-value search over the representable values (ties to the
// even code), saturation by clamping, amaxes by std::fmax. Slow and obvious on purpose. The random
// Hadamard transform from TE's Python definition: the sign vector times the Sylvester matrix built by
// doubling, a plain fp32 matrix-vector product, bf16 rounding by scaling to an integer.
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

inline std::uint8_t e4m3(float v) {  // v >= 0 here; NaN is E4M3's 0x7F
  if (std::isnan(v)) return 0x7F;
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

/// TE's get_wgrad_sign_vector.
inline constexpr int rht_signs[16] = {1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};

/// The RHT matrix diag(signs) * H16 / 4, H16 by Sylvester's doubling H_2n = [[H, H], [H, -H]].
inline std::vector<float> rht_matrix() {
  std::vector<int> h{1};
  for (std::size_t n = 1; n < 16; n *= 2) {
    std::vector<int> g(4 * n * n);
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t c = 0; c < n; ++c) {
        const int v = h[r * n + c];
        g[r * 2 * n + c] = v;
        g[r * 2 * n + c + n] = v;
        g[(r + n) * 2 * n + c] = v;
        g[(r + n) * 2 * n + c + n] = -v;
      }
    h = g;
  }
  std::vector<float> m(256);
  for (std::size_t r = 0; r < 16; ++r)
    for (std::size_t c = 0; c < 16; ++c) m[r * 16 + c] = static_cast<float>(rht_signs[r] * h[r * 16 + c]) * 0.25f;
  return m;
}

/// Round to nearest-even bf16 (8 significant bits; bf16 subnormals are multiples of 2^-133).
inline float bf16_round(float v) {
  if (std::isnan(v) || std::isinf(v) || v == 0.0f) return v;
  int e = 0;
  (void)std::frexp(static_cast<double>(v), &e);  // |v| in [2^(e-1), 2^e)
  const int quantum = std::max(e - 8, -133);
  const double r = std::nearbyint(std::ldexp(static_cast<double>(v), -quantum));  // ties to even
  return static_cast<float>(std::ldexp(r, quantum));  // beyond FLT_MAX: inf
}

/// y = x M per 16 consecutive rows of each column of x [M, K] (M a multiple of 16): fp32 products
/// summed in row order, each result rounded to bf16 (TE's kernels round the MMA's output so).
inline std::vector<float> rht_columns(const std::vector<float>& x, std::size_t M, std::size_t K) {
  static const std::vector<float> m = rht_matrix();
  std::vector<float> y(M * K);
  for (std::size_t k = 0; k < K; ++k)
    for (std::size_t g = 0; g < M; g += 16)
      for (std::size_t c = 0; c < 16; ++c) {
        float acc = 0.0f;
        for (std::size_t r = 0; r < 16; ++r) {
          const float p = x[(g + r) * K + k] * m[r * 16 + c];
          acc = acc + p;
        }
        y[(g + c) * K + k] = bf16_round(acc);
      }
  return y;
}

/// One direction of an NVFP4 cast of x [M, K] in plain index arithmetic: codes (one per element, in the
/// direction's order: [M, K] rowwise, [K, M] columnwise) and the E4M3 block scales per (line, block).
struct result {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint8_t> scales;  // [lines][blocks]
  std::size_t blocks = 0;
  float global_decode = 0.0f;
};

/// With `rht` (columnwise only) the cast reads rht_columns(x) and rounds as TE's RHT-cast fusion kernel:
/// block amax NaN-propagating, scale e4m3((block_amax / 6) * S_enc), multiplier NaN-propagating.
inline result cast(const std::vector<float>& x_in, std::size_t M, std::size_t K, bool columnwise, bool tile_2d,
                   bool rht = false) {
  const bool fused = rht && columnwise;
  const std::vector<float> x = fused ? rht_columns(x_in, M, K) : x_in;
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
        for (std::size_t i = b * 16; i < std::min(len, b * 16 + 16); ++i) {
          const float a = std::fabs(at(l, i));
          bamax = fused && (std::isnan(a) || std::isnan(bamax)) ? std::numeric_limits<float>::quiet_NaN()
                                                               : std::fmax(bamax, a);
        }
      }
      const std::uint8_t sc = fused ? e4m3(bamax / 6.0f * s_enc) : e4m3(bamax * (s_enc * inv6));
      r.scales[l * r.blocks + b] = sc;
      const float scale_value = sc == 0x7F ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(e4m3_value(sc));
      float mult = 1.0f / (scale_value * s_dec);
      if (mult > std::numeric_limits<float>::max()) mult = std::numeric_limits<float>::max();  // NaN stays
      for (std::size_t i = b * 16; i < std::min(len, b * 16 + 16); ++i) r.codes[l * len + i] = e2m1(at(l, i) * mult);
    }
  return r;
}

}  // namespace nvfp4_reference
