// SPDX-License-Identifier: Apache-2.0
// What an execution backend is: where buffers live and where quantization and updates run.
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>

#include "tequant/policy.hpp"

namespace tequant {

/// An execution backend (host_backend, cuda_backend).
/// Semantic requirements:
///  1. `make_buffer<T>(n)` returns an owning, movable buffer of n zeroed T in the backend's memory,
///     with `data()`; pointers into it are what the other operations take.
///  2. `copy` (backend to backend), `download` (backend to host), `upload` (host to backend) and
///     `fill` move plain values; `read(p)` returns one value (a host synchronisation on a device).
///  3. `max_accumulate(p, v)` sets *p = fmax(*p, v): NaN ignored, never lowers the value.
///  4. `host_accessible` is true when backend pointers may be dereferenced on the host.
///  5. Quantizers and `update_delayed(view, algo, args)` follow the host backend's signatures.
template <class B>
concept execution_backend = std::derived_from<typename B::policy_kind, backend_kind> &&
    requires(B& b, const B& cb, float* f, const float* cf, std::uint32_t* u, std::size_t n) {
      { B::host_accessible } -> std::convertible_to<bool>;
      b.template make_buffer<float>(n).data();
      b.template make_buffer<std::uint32_t>(n).data();
      b.copy(f, cf, n);
      b.download(f, cf, n);
      b.upload(f, cf, n);
      b.fill(f, n, 0.0f);
      b.fill(u, n, std::uint32_t{0});
      { cb.read(cf) } -> std::same_as<float>;
      b.max_accumulate(f, 0.0f);
    };

namespace detail {

template <class B>
constexpr bool check_backend() {
  if constexpr (!requires { sizeof(B); }) {
    static_assert(dependent_false<B>,
                  "tequant: Backend (5th argument of quantization_manager) is only declared here: include "
                  "<tequant/backend/host.hpp> (the default, host_backend) or the backend's header before "
                  "instantiating the manager");
    return false;
  } else {
    static_assert(execution_backend<B>,
                  "tequant: Backend (5th argument of quantization_manager) must model tequant::execution_backend "
                  "(host_backend, cuda_backend) - see backend/concepts.hpp");
    return execution_backend<B>;
  }
}

}  // namespace detail
}  // namespace tequant
