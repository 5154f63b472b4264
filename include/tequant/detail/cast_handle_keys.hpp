// SPDX-License-Identifier: Apache-2.0
// The part of quantization_manager behind cast handles: the keys that let plan_cast(handle) trust a
// kept plan after one compare, and the binding a handle needs when the compare fails.
//
// A handle keeps the recipe's plan, which points into recipe state that a registration or a state load
// may move. Each of those starts a new epoch; an epoch's key is the address of a cell this part keeps
// until it dies, so no two epochs of live managers share a key, and a handle's key equals the manager's
// only if that manager bound it in its current epoch. Keys are 8-aligned: key | 1 matches no handle.
// The forward key is the epoch's only where a forward cast takes the kept plan as it is (an enabled
// region, no frame open): whatever may end that (a disabled region, a frame opening, a new epoch)
// spoils it, one `or`; the slow path restores it when it holds again, so closing frames and entering
// enabled regions cost nothing (the next forward cast goes out of line once).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "tequant/cast_plan.hpp"
#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/manager_types.hpp"

namespace tequant::detail {

/// Whether a handle may keep the recipe part's plan until the state moves (else every cast asks again).
template <class RecipePart>
inline constexpr bool keeps_plans = requires { requires RecipePart::stable_plans; };

class cast_handle_keys {
 public:
  cast_handle_keys() = default;
  // The first key is this part's own address: it stays where it was built, as the manager does.
  cast_handle_keys(const cast_handle_keys&) = delete;
  cast_handle_keys& operator=(const cast_handle_keys&) = delete;

  /// Call it before whatever moves the recipe state: it allocates (may throw) while nothing has moved.
  void new_epoch() {
    // Heap cells never move and live as long as this part, so their addresses stay unique keys; the
    // key changes only once the cell is kept (a failed push_back frees it, the epoch stays).
    cells_.push_back(std::make_unique<std::uint64_t>(0));
    epoch_ = reinterpret_cast<std::uintptr_t>(cells_.back().get());
    forward_ = epoch_ | 1u;
  }
  void spoil() noexcept { forward_ |= 1u; }
  void restore() noexcept { forward_ = epoch_; }
  /// The current epoch's key: a handle this manager bound (or re-bound) since the last registration or
  /// state load holds it.
  std::uintptr_t epoch() const noexcept { return epoch_; }
  /// What a handle's key must equal for plan_cast(handle) to return what the handle keeps.
  template <direction D>
  TEQUANT_ALWAYS_INLINE std::uintptr_t key() const noexcept {
    if constexpr (D == direction::forward) return forward_;
    else return epoch_;
  }

  /// A handle of `owner` for slot `s`, bound in the current epoch (`table` and `recipe` are the
  /// manager's parts: the slot is checked there, the plan taken there).
  template <direction D, class Table, class Recipe>
  cast_handle<D> bind(slot_id s, const void* owner, const Table& table, Recipe& recipe) const {
    if (s.dir != D) [[unlikely]]
      fail("bind<", to_string(D), ">: slot (bucket ", s.bucket, ", index ", s.index, ") is a ", to_string(s.dir),
           " slot");
    cast_handle<D> h;
    h.owner_ = owner;
    h.slot_ = s;
    rebind(h, table, recipe, "bind");
    return h;
  }

  /// plan_cast(handle) where the key did not match: a handle of another manager (or none) throws, a
  /// stale one re-binds; then the autocast state (`enabled`) and the frames (`in_frames`) shape a
  /// forward plan as for slot ids. The plan lies in the handle: the kept one where nothing may change
  /// it (a backward slot of a recipe that keeps plans), else last_.
  template <direction D, class Table, class Recipe, class InFrames>
  TEQUANT_ALWAYS_INLINE const cast_plan& plan_cast_slow(cast_handle<D>& h, const void* owner, const Table& table,
                                                        Recipe& recipe, bool enabled, bool frames_open,
                                                        InFrames&& in_frames) {
    if (h.owner_ != owner) [[unlikely]]
      foreign_handle(D, h.slot_, h.owner_ == nullptr);
    if (h.key_ != epoch_) rebind(h, table, recipe, "plan_cast");
    if constexpr (D == direction::forward)
      if (enabled && !frames_open) restore();  // the common path holds again
    const slot_id s{D, h.slot_.bucket, h.slot_.index};
    if constexpr (D == direction::backward && keeps_plans<Recipe>) {
      return h.kept_;
    } else {
      cast_plan& plan = h.last_;
      if constexpr (keeps_plans<Recipe>) plan = h.kept_;
      else plan = recipe.plan(s);
      if constexpr (D == direction::forward) {
        if (!enabled) [[unlikely]] {
          plan.enabled = false;
          plan.amax = nullptr;
        } else if (frames_open) {
          plan = in_frames(s, plan);
        }
      }
      return plan;
    }
  }

 private:
  template <direction D, class Table, class Recipe>
  void rebind(cast_handle<D>& h, const Table& table, Recipe& recipe, const char* where) const {
    table.template check_in<D>(h.slot_, where);
    if constexpr (keeps_plans<Recipe>) h.kept_ = recipe.plan(slot_id{D, h.slot_.bucket, h.slot_.index});
    h.key_ = epoch_;
  }
  [[noreturn, gnu::noinline, gnu::cold]] static void foreign_handle(direction d, slot_id s, bool unbound) {
    fail("plan_cast: a ", to_string(d), " cast handle (bucket ", s.bucket, ", index ", s.index, ") ",
         unbound ? "that no manager bound (default-constructed)" : "that another manager bound",
         "; bind it with this manager's bind()");
  }

  std::vector<std::unique_ptr<std::uint64_t>> cells_;
  // Before the first epoch the key is the list's own address (no cell has it).
  std::uintptr_t epoch_ = reinterpret_cast<std::uintptr_t>(&cells_);
  std::uintptr_t forward_ = epoch_ | 1u;  // the manager starts outside any enabled region
};

}  // namespace tequant::detail
