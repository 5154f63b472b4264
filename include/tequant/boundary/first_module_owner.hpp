// SPDX-License-Identifier: Apache-2.0
// TE's old rule, kept only so that tests can show its failures next to the fixed strategies.
#pragma once
#include "tequant/boundary/concepts.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// The first quantized module (with a backward) of the outermost autocast owns the backward update
/// and flushes it from its own backward. Reproduces TE main, bugs included (te-semantics §4.3, §7):
/// the ownership flag is reset at every depth-0 autocast entry, restored on every autocast exit
/// (reviving consumed ownership), and modules that run inside a replay restore it after consuming
/// it. Gives twice / too early / never in scenarios A–G. Do not train with it.
struct first_module_owner {
  using policy_kind = boundary_kind;
  static constexpr bool flushes_at_autocast_entry = false;
  static constexpr bool requests_need_scope = false;
  static constexpr bool first_module_owns = true;
  static constexpr bool uses_graph_hooks = false;
};

static_assert(boundary_strategy<first_module_owner>);

}  // namespace tequant
