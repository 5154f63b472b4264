// SPDX-License-Identifier: Apache-2.0
// TE's old rule, kept only so that tests can show its failures next to the fixed strategies.
#pragma once
#include <cstdint>

#include "tequant/boundary/concepts.hpp"
#include "tequant/boundary/flush_control.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// The first quantized module (with a backward) of the outermost autocast owns the backward update
/// and flushes it from its own backward. Reproduces TE main, bugs included (te-semantics §4.3, §7):
/// the ownership flag is reset at every depth-0 autocast entry, restored on every autocast exit
/// (reviving consumed ownership), and modules that run inside a replay restore it after consuming
/// it. Gives twice / too early / never in scenarios A-G. Do not train with it.
struct first_module_owner {
  using policy_kind = boundary_kind;

  /// A module forward that counts consumes the flag (in a replay it keeps it, as TE main does).
  backward_ticket on_module_forward(forward_event e) noexcept {
    if (!e.counts) return {};
    const bool was = owner_;
    if (!e.in_replay) owner_ = false;
    return {was};
  }
  /// TE resets the flag at every depth-0 entry (replays included) and restores it at every exit.
  bool on_autocast_enter(std::uint32_t depth) noexcept {
    const bool previous = owner_;
    if (depth == 0) owner_ = true;
    return previous;
  }
  void on_autocast_exit(bool previous) noexcept { owner_ = previous; }

  /// Only the owner's backward does anything, and it flushes at once.
  template <class Port>
  void on_request(Port&) noexcept {}
  template <class Port>
  void on_request(Port& port, backward_ticket ticket) {
    if (!ticket.owner) return;
    port.mark_pending();
    port.flush();
  }
  /// TE's modules know no failed backward: what it staged waits for the next owner's flush.
  template <class Port>
  void on_failed_backward(Port&) noexcept {}

 private:
  bool owner_ = false;
};

static_assert(boundary_strategy<first_module_owner>);

}  // namespace tequant
