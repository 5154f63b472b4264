// SPDX-License-Identifier: Apache-2.0
// Independent scalar references for the quantizer tests. Written from the definitions (TE semantics),
// not from tequant's formulas: FP8 encoding by nearest-value search over the code table, E8M0 by
// frexp, scales with their own edge rules.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tequant/format/fp8.hpp"
#include "tequant/format/half.hpp"

namespace ref {

inline std::uint32_t bits(float f) { std::uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float from_bits(std::uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

/// Positive finite FP8 values by code (code = index), from the format definition.
inline const std::vector<double>& fp8_table(tequant::fp8_dtype d) {
  static const std::vector<double> t4 = [] {
    std::vector<double> t;
    for (int c = 0; c <= 0x7E; ++c) {
      const int e = c >> 3, m = c & 7;
      t.push_back(e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, e - 7));
    }
    return t;
  }();
  static const std::vector<double> t5 = [] {
    std::vector<double> t;
    for (int c = 0; c <= 0x7B; ++c) {
      const int e = c >> 2, m = c & 3;
      t.push_back(e == 0 ? m * std::ldexp(1.0, -16) : (1.0 + m / 4.0) * std::ldexp(1.0, e - 15));
    }
    return t;
  }();
  return d == tequant::fp8_dtype::e4m3 ? t4 : t5;
}

/// Satfinite RNE cast: nearest code, ties to the even code, |y| beyond max clips to max, NaN -> 0x7F.
inline std::uint8_t encode(tequant::fp8_dtype d, float y) {
  if (std::isnan(y)) return 0x7F;
  const auto& t = fp8_table(d);
  const std::uint8_t sign = std::signbit(y) ? 0x80 : 0x00;
  const double a = std::fabs(static_cast<double>(y));
  if (a >= t.back()) return static_cast<std::uint8_t>(sign | (t.size() - 1));
  const auto hi = static_cast<std::size_t>(std::upper_bound(t.begin(), t.end(), a) - t.begin());  // t[hi-1] <= a < t[hi]
  const std::size_t lo = hi - 1;
  const double dl = a - t[lo], dh = t[hi] - a;
  std::size_t c = dl < dh ? lo : dh < dl ? hi : (lo % 2 == 0 ? lo : hi);
  return static_cast<std::uint8_t>(sign | c);
}

template <class T>
float widen(T v) { return tequant::to_float(v); }

/// fmax-style amax: NaN ignored, starts at 0.
template <class T>
float amax(const T* x, std::size_t n) {
  float m = 0.0f;
  for (std::size_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs(widen(x[i])));
  return m;
}

/// TE's compute_scale_from_amax.
inline float scale_from_amax(float a, float fmax, bool pow2, float eps, float vinf) {
  if (a < eps) a = eps;
  if (std::isnan(a) || std::isinf(a) || a == 0.0f) return 1.0f;
  float s = fmax / a;
  if (std::isinf(s)) s = vinf;
  if (pow2) {  // truncation to a power of two: s = f * 2^ex, f in [0.5, 1) -> 2^(ex-1)
    int ex;
    std::frexp(static_cast<double>(s), &ex);
    s = std::ldexp(1.0f, ex - 1);
  }
  return s;
}

/// E8M0 of v >= 0: clamp(ceil(log2 v) + 127, 0, 254); NaN -> 255.
inline std::uint8_t e8m0(float v) {
  if (std::isnan(v)) return 255;
  if (std::isinf(v)) return 254;
  if (v == 0.0f) return 0;
  int ex;
  const double f = std::frexp(static_cast<double>(v), &ex);  // v = f * 2^ex, f in [0.5, 1)
  const int c = (f == 0.5 ? ex - 1 : ex) + 127;
  return static_cast<std::uint8_t>(std::clamp(c, 0, 254));
}
/// What TransformerEngine's MXFP8 kernels multiply by: exp2f_rcp(e) = e == 0 ? 1 : exp2f(127 - e),
/// with denormal results flushed to zero (code 254: 2^-127 -> 0).
inline float e8m0_mult(std::uint8_t e) {
  if (e == 0) return 1.0f;
  const float m = std::ldexp(1.0f, 127 - static_cast<int>(e));
  return std::fpclassify(m) == FP_SUBNORMAL ? 0.0f : m;
}

template <class T>
float input_max() {
  if constexpr (std::is_same_v<T, tequant::bf16>) return from_bits(0x7F7F0000u);
  else if constexpr (std::is_same_v<T, tequant::fp16>) return 65504.0f;
  else return std::numeric_limits<float>::max();
}

}  // namespace ref
