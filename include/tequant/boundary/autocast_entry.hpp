// SPDX-License-Identifier: Apache-2.0
// Flush at the next top-level autocast entry (TE's fallback; needs nothing from the engine).
#pragma once
#include "tequant/boundary/concepts.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// The backward update of step k runs when step k+1 enters its first autocast region. The next
/// forward uses forward scales only, so nothing reads the stale backward scales in between.
/// Without graph hooks the manager cannot see a backward task: an autocast region entered at depth 0
/// inside a backward node (outside a checkpoint replay and a backward scope) flushes there. Wrap such
/// backwards (e.g. an externally driven recompute) in backward_scope().
struct autocast_entry {
  using policy_kind = boundary_kind;

  template <class Port>
  void on_request(Port& port) noexcept {
    port.mark_pending();
    port.settle();  // until the flush, further requests change nothing
  }
  template <class Port>
  void on_top_level_entry(Port& port) {
    port.flush();
  }
};

static_assert(boundary_strategy<autocast_entry>);

}  // namespace tequant
