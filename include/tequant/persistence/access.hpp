// SPDX-License-Identifier: Apache-2.0
// The one door from persistence/ into a manager's private state (the manager befriends it).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tequant/manager.hpp"
#include "tequant/manager_types.hpp"

namespace tequant::detail {

struct manager_access {
  template <class M>
  static auto& state(M& m) noexcept {
    return m.state_;
  }
  // Caches the manager derives from its state (pointers into the recipe state, for the cast path)
  // must follow a load's commit: room is reserved before the commit, the refresh after it cannot throw.
  template <class M>
  static void reserve_derived(M& m, std::size_t buckets) {
    if constexpr (requires { m.state_.hot.reserve(buckets); }) m.state_.hot.reserve(buckets);
  }
  template <class M>
  static void refresh_derived(M& m) noexcept {
    if constexpr (requires { m.refresh_hot(); }) m.refresh_hot();
  }
  template <class M>
  static std::uint32_t num_gemms(const M& m, module_handle h) {
    (void)m.module_name(h);  // range check with the manager's message
    return m.state_.modules[h.index].num_gemms;
  }
};

}  // namespace tequant::detail
