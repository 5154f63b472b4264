// SPDX-License-Identifier: Apache-2.0
// Flush at the exit of the outermost backward_scope(); requests outside a scope are errors.
#pragma once
#include "tequant/boundary/concepts.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// The training loop names the logical backward itself. Strictest and engine-agnostic: a request
/// outside a scope would otherwise be lost, so it raises tequant::error instead.
struct explicit_scope {
  using policy_kind = boundary_kind;
  static constexpr bool flushes_at_autocast_entry = false;
  static constexpr bool requests_need_scope = true;
  static constexpr bool first_module_owns = false;
  static constexpr bool uses_graph_hooks = false;
};

static_assert(boundary_strategy<explicit_scope>);

}  // namespace tequant
