// SPDX-License-Identifier: Apache-2.0
// The host (CPU) execution backend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tequant/backend/concepts.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace tequant {

/// CPU backend: buffers are std::vector, every pointer is a host pointer.
struct host_backend {
  using policy_kind = backend_kind;
  static constexpr bool host_accessible = true;

  template <class T>
  using buffer = std::vector<T>;

  /// n zeroed values.
  template <class T>
  buffer<T> make_buffer(std::size_t n) const { return buffer<T>(n); }

  template <class T>
  void copy(T* dst, const T* src, std::size_t n) const noexcept { if (n) std::memmove(dst, src, n * sizeof(T)); }
  template <class T>
  void download(T* host_dst, const T* src, std::size_t n) const noexcept { copy(host_dst, src, n); }
  template <class T>
  void upload(T* dst, const T* host_src, std::size_t n) const noexcept { copy(dst, host_src, n); }
  template <class T>
  void fill(T* dst, std::size_t n, T value) const noexcept { for (std::size_t i = 0; i < n; ++i) dst[i] = value; }
  template <class T>
  T read(const T* p) const noexcept { return *p; }

  /// *p = fmax(*p, v): the staging amax never goes down and NaN is ignored.
  void max_accumulate(float* p, float v) const noexcept { *p = detail::nan_ignoring_max(*p, v); }

  /// TE's fused delayed update over one bucket: one pass, O(1) memory per slot.
  template <class Algo>
  void update_delayed(const delayed_bucket_view& v, Algo algo, delayed_update_args args) const noexcept {
    delayed_update_bucket_host(v, algo, args);
  }
};

static_assert(execution_backend<host_backend>);

}  // namespace tequant
