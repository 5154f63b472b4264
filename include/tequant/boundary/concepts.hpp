// SPDX-License-Identifier: Apache-2.0
// What a boundary strategy is (when the pending backward update is flushed) and what an autograd
// engine must offer for the engine_callback strategy (graph_hooks).
#pragma once
#include <concepts>
#include <type_traits>

#include "tequant/policy.hpp"

namespace tequant {

/// What the host autograd engine tells the manager. See docs/graph_hooks.md.
/// Semantic requirements:
///  1. `in_backward()` is true while the calling thread runs inside any backward task of the engine
///     (a node's backward, a nested/reentrant backward, a replay inside a task), false otherwise.
///  2. `queue_callback(fn, ctx)` arranges for `fn(ctx)` to run exactly once, on the engine's side,
///     after every node of the CURRENT task has run (for a nested backward: the nested task), and
///     returns true; it returns false when it cannot (no task, or an engine without final callbacks),
///     and then never calls fn.
///  3. A task that ends with an exception may drop its callbacks (as PyTorch does); the manager
///     notices at the next top-level autocast entry, or the next backward_scope() opened outside any
///     task, and recovers (the update is flushed once, never lost). Known limit: a backward retried
///     before either of those does not flush at its own end, because the hooks carry no task
///     identity (docs/reliability.md, reliability_failed_task_test).
///  4. Both may be called from several threads at once (engine worker threads).
template <class H>
concept graph_hooks = requires(H& h, void (*fn)(void*), void* ctx) {
  { h.in_backward() } -> std::convertible_to<bool>;
  { h.queue_callback(fn, ctx) } -> std::convertible_to<bool>;
};

/// When the pending backward update is flushed (ARCHITECTURE §3). The manager implements the
/// mechanics; a strategy states which of them apply.
/// Semantic requirements:
///  1. `flushes_at_autocast_entry`: a pending update is flushed at the next top-level autocast entry
///     that is outside any backward, backward scope and replay.
///  2. `requests_need_scope`: a request outside any backward_scope() is an error.
///  3. `first_module_owns`: TE's old rule; the first quantized module of the outermost autocast owns
///     the update and flushes it from its own backward (kept only to reproduce TE's failures).
///  4. `uses_graph_hooks`: the strategy holds `hooks()` (a graph_hooks) and the manager queues one
///     callback on the outermost backward task.
template <class B>
concept boundary_strategy = std::derived_from<typename B::policy_kind, boundary_kind> &&
                            std::is_nothrow_move_constructible_v<B> && requires {
                              { B::flushes_at_autocast_entry } -> std::convertible_to<bool>;
                              { B::requests_need_scope } -> std::convertible_to<bool>;
                              { B::first_module_owns } -> std::convertible_to<bool>;
                              { B::uses_graph_hooks } -> std::convertible_to<bool>;
                            } && (!B::uses_graph_hooks || requires(B& b) {
                              { b.hooks().in_backward() } -> std::convertible_to<bool>;
                            });

}  // namespace tequant
