// SPDX-License-Identifier: Apache-2.0
// The one door from persistence/ into a manager's parts (the manager befriends it).
#pragma once
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tequant/manager.hpp"
#include "tequant/manager_types.hpp"

namespace tequant::detail {

struct manager_access {
  template <class M>
  static auto& table(M& m) noexcept {
    return m.table_;
  }
  template <class M>
  static auto& recipe(M& m) noexcept {
    return m.recipe_;
  }
  template <class M>
  static auto& frames(M& m) noexcept {
    return m.frames_;
  }
  /// A new cast-handle epoch (may throw; before a load commits): the loaded state moves what handles keep.
  template <class M>
  static void new_epoch(M& m) {
    m.keys_.new_epoch();
  }
  /// Counters and the pending flag as a state file holds them (between steps: nothing else runs).
  template <class M>
  static void restore(M& m, const std::uint64_t (&counters)[3], bool pending) noexcept {
    m.counters_.forward.store(counters[0]);
    m.counters_.backward.store(counters[1]);
    m.counters_.collectives.store(counters[2]);
    m.flush_.restore_pending(pending);
  }

  // (Through recipe(), not M::recipe_part: clang checks an alias template's access outside the friend.)
  template <class M>
  using recipe_part_t = std::remove_reference_t<decltype(recipe(std::declval<M&>()))>;
};

}  // namespace tequant::detail
