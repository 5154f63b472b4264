// SPDX-License-Identifier: Apache-2.0
// Checksums that data-parallel ranks compare after every step: equal checksums = bit-identical state.
// Shared by gpt_mpi (the own engine) and libtorch_gpt --ranks; no engine of its own.
#pragma once
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

namespace gpt {

/// FNV-1a over the bits of floats (stable across processes, unlike std::hash).
class fnv1a {
 public:
  void add(float f) {
    const std::uint32_t u = std::bit_cast<std::uint32_t>(f);
    for (int i = 0; i < 4; ++i) h_ = (h_ ^ ((u >> (8 * i)) & 0xffu)) * 1099511628211ull;
  }
  void add(std::uint64_t u) {
    for (int i = 0; i < 8; ++i) h_ = (h_ ^ ((u >> (8 * i)) & 0xffu)) * 1099511628211ull;
  }
  void add(std::span<const float> v) {
    for (float f : v) add(f);
  }
  std::uint64_t value() const { return h_; }

 private:
  std::uint64_t h_ = 14695981039346656037ull;
};

/// The committed scaling state: every bucket's scales and amax history (TE's [L, n] layout without
/// row 0, the staging amaxes: those are each rank's own until the next update reduces them), or, for
/// NVFP4, every slot's stochastic-rounding stream position. 0 for a stateless recipe.
template <class Manager>
std::uint64_t state_checksum(const Manager& m) {
  if constexpr (!Manager::is_stateful) {
    (void)m;
    return 0;
  } else {
    fnv1a h;
    for (const auto& bucket : m.recipe_state()) {
      if constexpr (requires { bucket.offsets; }) {
        for (const std::uint64_t o : bucket.offsets) h.add(o);
      } else {
        const std::uint32_t n = bucket.size(), L = bucket.history_length();
        for (std::uint32_t j = 0; j < n; ++j) h.add(bucket.scale(j));
        std::vector<float> history(std::size_t(L) * n);
        bucket.export_te_history(0, n, history);
        history.erase(history.begin(), history.begin() + n);  // row 0: staging
        h.add(history);
      }
    }
    return h.value();
  }
}

/// Every parameter's values (the own engine's tensors: p->value.data).
template <class Params>
std::uint64_t weights_checksum(const Params& params) {
  fnv1a h;
  for (const auto& p : params) h.add(p->value.data);
  return h.value();
}

}  // namespace gpt
