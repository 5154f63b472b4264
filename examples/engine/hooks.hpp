// SPDX-License-Identifier: Apache-2.0
// The two questions tequant asks an autograd engine (tequant::graph_hooks), answered for mini::engine.
#pragma once
#include <tequant/boundary/concepts.hpp>

#include "autograd.hpp"

namespace mini {

// example-begin graph_hooks
/// tequant::graph_hooks for mini::engine. The manager queues one callback on the outermost backward
/// task of each logical backward and flushes the backward update from it; the hooks only report
/// "am I inside a backward task?" and queue on the CURRENT task.
struct hooks {
  engine* e = nullptr;

  bool in_backward() const noexcept { return e != nullptr && e->in_backward(); }
  /// false = "cannot queue here": the manager then flushes at the next top-level autocast entry.
  bool queue_callback(void (*fn)(void*), void* ctx) { return e != nullptr && e->queue_final_callback(fn, ctx); }
};
static_assert(tequant::graph_hooks<hooks>);
// example-end
// (engine_callback also needs the hooks to be nothrow-movable: a pointer is.)

}  // namespace mini
