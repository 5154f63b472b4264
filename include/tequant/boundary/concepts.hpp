// SPDX-License-Identifier: Apache-2.0
// What a boundary policy is (a part that decides when the pending backward update is flushed, by
// reacting to events) and what an autograd engine offers the engine_callback policy (graph_hooks).
#pragma once
#include <concepts>
#include <cstdint>
#include <type_traits>

#include "tequant/manager_types.hpp"
#include "tequant/policy.hpp"

namespace tequant {

// ---- graph_hooks ------------------------------------------------------------------------------------

/// What the host autograd engine tells engine_callback. See docs/graph_hooks.md.
/// Semantic requirements:
///  1. `in_backward()` is true while the calling thread runs inside any backward task of the engine
///     (a node's backward, a nested backward, a replay inside a task), false otherwise.
///  2. `queue_callback(fn, ctx)` arranges for `fn(ctx)` to run exactly once, on the engine's side,
///     after every node of the CURRENT task has run (for a nested backward: the nested task), and
///     returns true; it returns false when it cannot (no task, or an engine without final callbacks),
///     and then never calls fn. A task that ends with an exception may drop its callbacks.
///  3. Both may be called from several threads at once (engine worker threads).
template <class H>
concept graph_hooks = requires(H& h, void (*fn)(void*), void* ctx) {
  { h.in_backward() } -> std::convertible_to<bool>;
  { h.queue_callback(fn, ctx) } -> std::convertible_to<bool>;
};

/// Optional: how deep the current task is nested (0: a task started outside any backward; n: a
/// backward() run by a node of a task of depth n-1). With it, a nested task that is not a checkpoint
/// replay never flushes by itself.
template <class H>
concept hooks_with_task_depth = graph_hooks<H> && requires(const H& h) {
  { h.task_depth() } -> std::convertible_to<std::uint32_t>;
};

/// Optional: `queue_callback(fn, dropped, ctx)` calls exactly one of fn(ctx) (the task completed) or
/// dropped(ctx) (the task failed and discarded its callbacks), so a retried backward flushes at its end.
template <class H>
concept hooks_with_drop_notice = graph_hooks<H> && requires(H& h, void (*fn)(void*), void* ctx) {
  { h.queue_callback(fn, fn, ctx) } -> std::convertible_to<bool>;
};

/// Optional: the engine's own grad mode, so the manager needs no second one kept in sync by hand.
template <class H>
concept hooks_with_grad_mode = graph_hooks<H> && requires(const H& h) {
  { h.grad_enabled() } -> std::convertible_to<bool>;
};

/// Optional: whether the hooks are connected to an engine (hooks that point at an engine object); a
/// manager refuses to be built on detached hooks instead of silently never flushing at task ends.
template <class H>
concept hooks_with_attachment = graph_hooks<H> && requires(const H& h) {
  { h.attached() } -> std::convertible_to<bool>;
};

// ---- boundary policies ------------------------------------------------------------------------------

namespace detail {

/// The smallest port a boundary policy's handlers may use (flush_control is the real one): the
/// concept instantiates a policy's handlers with it, so a handler that needs more does not model it.
struct flush_port_archetype {
  void mark_pending() noexcept {}
  bool pending() const noexcept { return false; }
  void flush() {}
  bool in_scope() const noexcept { return false; }
  void settle() noexcept {}
  void recover_at_next_entry() noexcept {}
  void (*task_end())(void*) { return nullptr; }
  void (*task_dropped())(void*) { return nullptr; }
  void* context() noexcept { return nullptr; }
};

}  // namespace detail

/// When the pending backward update is flushed (ARCHITECTURE §3, §6.1). A boundary policy is a part:
/// it owns its state and reacts to the events the manager forwards through a port (see
/// boundary/flush_control.hpp, which owns what every policy shares: the pending flag and backward
/// scopes). Required:
///   using policy_kind = tequant::boundary_kind;
///   void on_request(Port&);   a module backward's request outside any backward_scope()
/// Optional (detected; the default in brackets):
///   void on_request(Port&, backward_ticket)          [on_request(Port&)]
///   backward_ticket on_module_forward(bool counts)   [{}]   counts: quantized forward that will run backward
///   Memo on_autocast_enter(std::uint32_t depth) / void on_autocast_exit(Memo)   [nothing]
///   void on_top_level_entry(Port&)                   [nothing]  an autocast entry at depth 0 outside
///                                                               any backward, scope and replay
///   bool on_scope_enter(Port&) / void on_scope_exit(Port&, bool handed_over)  [false / flush]
///   void on_replay_enter(Port&)                      [nothing]  a checkpoint replay opens
///   void on_defer(Port&)                             [nothing]  defer_weight_grad() outside a scope
///   void on_failed_backward(Port&)                   [recover_at_next_entry()]  a scope unwound
///   bool in_backward() const                         [false]
///   bool engine_grad_enabled() const                 [none]    the engine's grad mode
///   void check_attached() const                      [nothing] throws at manager construction
/// Semantic requirements: every handler is fast when it has nothing to do (requests arrive from every
/// module backward, possibly from several threads at once); `on_request` may throw only to report
/// misuse; the policy is nothrow move constructible (the manager takes it by value).
template <class B>
concept boundary_strategy = std::derived_from<typename B::policy_kind, boundary_kind> &&
                            std::is_nothrow_move_constructible_v<B> &&
                            requires(B& b, detail::flush_port_archetype& port) { b.on_request(port); };

namespace detail {

/// One `tequant:` error naming the first requirement a boundary policy misses (style guide P5).
template <class B>
constexpr bool check_boundary() {
  if constexpr (!opts_in_as<B, boundary_kind>) {
    static_assert(dependent_false<B>,
                  "tequant: Boundary (2nd argument of quantization_manager) must model tequant::boundary_strategy: "
                  "it does not declare `using policy_kind = tequant::boundary_kind;` - see boundary/concepts.hpp");
    return false;
  } else if constexpr (!std::is_nothrow_move_constructible_v<B>) {
    static_assert(dependent_false<B>,
                  "tequant: Boundary (2nd argument of quantization_manager) must model tequant::boundary_strategy: "
                  "it must be nothrow move constructible - see boundary/concepts.hpp");
    return false;
  } else if constexpr (!requires(B& b, flush_port_archetype& p) { b.on_request(p); }) {
    static_assert(dependent_false<B>,
                  "tequant: Boundary (2nd argument of quantization_manager) must model tequant::boundary_strategy: "
                  "it is missing `template <class Port> void on_request(Port&)` (what a module backward's "
                  "request does outside backward_scope()) - see boundary/concepts.hpp");
    return false;
  } else {
    return true;
  }
}

}  // namespace detail
}  // namespace tequant
