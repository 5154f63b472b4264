// SPDX-License-Identifier: Apache-2.0
// The two questions tequant asks an autograd engine (tequant::graph_hooks), answered for mini::engine.
#pragma once
#include <cstdint>

#include <tequant/boundary/concepts.hpp>

#include "autograd.hpp"

namespace mini {

// example-begin graph_hooks
/// tequant::graph_hooks for mini::engine. The manager queues one callback on the outermost backward
/// task of each logical backward and flushes the backward update from it; the hooks report "am I
/// inside a backward task, how deeply nested?" and queue on the CURRENT task.
struct hooks {
  engine* e = nullptr;

  bool in_backward() const noexcept { return e != nullptr && e->in_backward(); }
  /// false = "cannot queue here": the manager then flushes at the next top-level autocast entry.
  bool queue_callback(void (*fn)(void*), void* ctx) { return queue_callback(fn, nullptr, ctx); }

  // Optional members (each closes a gap of the minimum; docs/graph_hooks.md):
  /// 0 for a backward() started outside any task: a nested backward() never flushes by itself.
  std::uint32_t task_depth() const noexcept {
    return e == nullptr || e->task_depth() == 0 ? 0u : static_cast<std::uint32_t>(e->task_depth() - 1);
  }
  /// `dropped` runs instead of `fn` when the task fails, so a retried backward flushes at its end.
  bool queue_callback(void (*fn)(void*), void (*dropped)(void*), void* ctx) {
    return e != nullptr && e->queue_final_callback(fn, dropped, ctx);
  }
  /// The engine's own grad mode: the manager then needs no second one kept in sync by hand.
  bool grad_enabled() const noexcept { return e == nullptr || e->grad_enabled(); }
  /// A manager refuses hooks that point at no engine (no task would ever flush).
  bool attached() const noexcept { return e != nullptr; }
};
static_assert(tequant::graph_hooks<hooks> && tequant::hooks_with_task_depth<hooks> &&
              tequant::hooks_with_drop_notice<hooks> && tequant::hooks_with_grad_mode<hooks> &&
              tequant::hooks_with_attachment<hooks>);
// example-end
// (engine_callback also needs the hooks to be nothrow-movable: a pointer is.)

}  // namespace mini
