// SPDX-License-Identifier: Apache-2.0
// The one door from persistence/ into a manager's private state (the manager befriends it).
#pragma once
#include <cstdint>

#include "tequant/manager.hpp"
#include "tequant/manager_types.hpp"

namespace tequant::detail {

struct manager_access {
  template <class M>
  static auto& state(M& m) noexcept {
    return m.state_;
  }
  template <class M>
  static std::uint32_t num_gemms(const M& m, module_handle h) {
    (void)m.module_name(h);  // range check with the manager's message
    return m.state_.modules[h.index].num_gemms;
  }
};

}  // namespace tequant::detail
