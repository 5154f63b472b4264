// SPDX-License-Identifier: Apache-2.0
// Flush at the exit of the outermost backward_scope(); requests outside a scope are errors.
#pragma once
#include "tequant/boundary/concepts.hpp"
#include "tequant/error.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// The training loop names the logical backward itself. Strictest and engine-agnostic: a request
/// outside a scope would otherwise be lost, so it raises tequant::error instead. (Scope exits flush:
/// that is flush_control's default, shared by every policy.)
struct explicit_scope {
  using policy_kind = boundary_kind;

  template <class Port>
  [[noreturn]] void on_request(Port&) {
    detail::fail("request_backward_update() outside backward_scope() under explicit_scope: wrap the whole "
                 "logical backward (all backward calls and deferred weight-gradient work) in "
                 "manager.backward_scope()");
  }
};

static_assert(boundary_strategy<explicit_scope>);

}  // namespace tequant
