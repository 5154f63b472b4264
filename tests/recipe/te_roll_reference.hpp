// SPDX-License-Identifier: Apache-2.0
// A straightforward re-implementation of TransformerEngine's roll-based fused delayed-scaling update
// (te-semantics §3.4), written independently of tequant's ring/deque. The tests compare against it and
// the benchmark times it. Layout as TE: history [L, n] row-major, row 0 = staging, rows 1..L-1 oldest
// to newest.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

namespace te_roll {

enum class algo { max, most_recent };

struct state {
  std::uint32_t n = 0, L = 1;
  std::vector<float> history;  // [L, n]
  std::vector<float> scale;    // [n]
  std::vector<float> amax;     // scratch [n]
  std::vector<float> cur;      // scratch [n]

  state(std::uint32_t slots, std::uint32_t history_length)
      : n(slots), L(history_length), history(std::size_t{slots} * history_length, 0.0f), scale(slots, 1.0f),
        amax(slots), cur(slots) {}

  float* row(std::uint32_t i) { return history.data() + std::size_t{i} * n; }

  /// One fused update; the reduced amaxes are row 0. Row-wise loops so that the O(L*n) roll runs at
  /// memory speed (the fairest CPU version of TE's kernel).
  void update(algo a, float scaled_max) {
    const float* h0 = row(0);
    for (std::uint32_t j = 0; j < n; ++j) {
      cur[j] = h0[j];
      amax[j] = std::fmax(0.0f, h0[j]);
    }
    if (a == algo::max) {
      for (std::uint32_t i = 1; i < L; ++i) {
        const float* r = row(i);
        for (std::uint32_t j = 0; j < n; ++j) amax[j] = std::fmax(amax[j], r[j]);
      }
    }
    // Roll the used columns: [cur, old_1, ..., old_{L-1}] -> [0, old_2, ..., old_{L-1}, cur].
    for (std::uint32_t i = 1; i + 1 < L; ++i) {
      float* dst = row(i);
      const float* src = row(i + 1);
      for (std::uint32_t j = 0; j < n; ++j) dst[j] = cur[j] != 0.0f ? src[j] : dst[j];
    }
    if (L >= 2) {
      float* last = row(L - 1);
      for (std::uint32_t j = 0; j < n; ++j) last[j] = cur[j] != 0.0f ? cur[j] : last[j];
    }
    float* r0 = row(0);
    for (std::uint32_t j = 0; j < n; ++j) {
      const bool used = cur[j] != 0.0f;
      const float am = !used ? 0.0f : (a == algo::max ? amax[j] : cur[j]);
      float s = scale[j];
      if (std::isfinite(am) && am > 0.0f) s = scaled_max / am;
      if (std::isinf(s)) s = std::numeric_limits<float>::max();
      scale[j] = s;
      if (used) r0[j] = 0.0f;
    }
  }
};

}  // namespace te_roll
