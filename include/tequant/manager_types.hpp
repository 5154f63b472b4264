// SPDX-License-Identifier: Apache-2.0
// Small value types of the manager's public API (handles, roles, plans, statistics).
#pragma once
#include <cstddef>
#include <cstdint>

#include "tequant/cast_plan.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/format/fp8.hpp"

namespace tequant {

/// A registered module (index in registration order).
struct module_handle {
  std::uint32_t index = 0;
  friend constexpr bool operator==(module_handle, module_handle) = default;
};

/// Forward slots of one GEMM, in TE's order (index = 3 * gemm + role).
enum class forward_role : std::uint8_t { input = 0, weight = 1, output = 2 };
/// Backward slots of one GEMM, in TE's order (index = 2 * gemm + role).
enum class backward_role : std::uint8_t { grad_output = 0, grad_input = 1 };

constexpr const char* to_string(forward_role r) noexcept {
  return r == forward_role::input ? "input" : r == forward_role::weight ? "weight" : "output";
}
constexpr const char* to_string(backward_role r) noexcept {
  return r == backward_role::grad_output ? "grad_output" : "grad_input";
}

/// One quantized tensor role of one module: its bucket (direction, group) and index in the bucket.
struct slot_id {
  direction dir = direction::forward;
  std::uint32_t bucket = 0;
  std::uint32_t index = 0;
  friend constexpr bool operator==(slot_id, slot_id) = default;
};

template <class Recipe, class Boundary, class Checkpoint, class Comm, class Backend>
class quantization_manager;
namespace detail {
class cast_handle_keys;
}  // namespace detail

/// One slot bound to one manager for casting (quantization_manager::bind): what plan_cast needs on its
/// common path, kept with the module, and the plan plan_cast(handle) returns by reference (valid until
/// the handle's next plan_cast). The direction is part of the type. A handle stays usable across
/// registrations and state loads (its next cast re-binds it, once); a handle of another manager or a
/// default-constructed one makes plan_cast throw. Use one handle from one thread at a time.
template <direction D>
class cast_handle {
 public:
  static constexpr direction dir = D;
  cast_handle() = default;
  /// The slot this handle casts (a default-constructed handle: slot_id{}).
  slot_id slot() const noexcept { return slot_; }
  /// Whether a manager bound it (not whether it is that manager's current binding).
  bool bound() const noexcept { return owner_ != nullptr; }

 private:
  template <class, class, class, class, class>
  friend class quantization_manager;  // the common path reads the key and the kept plan
  friend class detail::cast_handle_keys;  // binds, and re-binds off the common path
  // kept_ first: the common path returns its address, the handle's own (no extra add per cast).
  cast_plan kept_{};        // the recipe's plan at binding (recipes whose plans are stable)
  std::uintptr_t key_ = 0;  // the manager's epoch at binding (0: never bound)
  const void* owner_ = nullptr;
  slot_id slot_{};
  cast_plan last_{};        // what the last cast off the common path returned
};
using forward_cast_handle = cast_handle<direction::forward>;
using backward_cast_handle = cast_handle<direction::backward>;

/// The tensor a slot stands for. Every module adds 3 forward and 2 backward slots per GEMM to each
/// bucket, in TE's order, so the role follows from the slot's index alone.
enum class tensor_role : std::uint8_t { input, weight, output, grad_output, grad_input };

constexpr tensor_role role_of(slot_id s) noexcept {
  return s.dir == direction::forward ? static_cast<tensor_role>(s.index % 3)
                                     : static_cast<tensor_role>(3 + s.index % 2);
}

constexpr const char* to_string(tensor_role r) noexcept {
  switch (r) {
    case tensor_role::input: return "input";
    case tensor_role::weight: return "weight";
    case tensor_role::output: return "output";
    case tensor_role::grad_output: return "grad_output";
    case tensor_role::grad_input: return "grad_input";
  }
  return "unknown";
}

/// Reduction groups of a module's forward and backward slots (comm-defined ids; 0 = the default group).
struct reduction_groups {
  std::uint32_t forward = 0;
  std::uint32_t backward = 0;
};

/// What module_forward hands to the module's backward. `owner` is only ever true under
/// first_module_owner (TE's old ownership flag).
struct backward_ticket {
  bool owner = false;
};

/// Counters and flags for tests, logging and invariant checks.
struct manager_stats {
  std::uint64_t forward_updates = 0;   ///< forward updates run (one per outermost autocast exit)
  std::uint64_t backward_updates = 0;  ///< backward updates run (one per logical backward)
  std::uint64_t collectives = 0;       ///< all_reduce_max calls issued
  bool pending = false;                ///< a backward update is requested and not yet flushed
  std::uint32_t autocast_depth = 0;
  std::uint32_t scope_depth = 0;       ///< backward_scope() nesting
  std::uint32_t checkpoint_depth = 0;  ///< open checkpoint frames (forward or replay)
  std::size_t outstanding_snapshots = 0;  ///< frames holding a snapshot that no replay consumed yet
};

}  // namespace tequant
