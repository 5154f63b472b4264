// SPDX-License-Identifier: Apache-2.0
// Flush once at the end of the outermost backward task, through the engine's final callbacks.
#pragma once
#include <atomic>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "tequant/boundary/concepts.hpp"
#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// One callback queued on the outermost backward task flushes the update (TE #3456). Where the hooks
/// cannot queue (no task, an engine without callbacks, a nested task) the update stays pending for a
/// later request in the outermost task or, at the latest, the next top-level autocast entry.
///
/// With hooks_with_task_depth, a nested backward task that is not a checkpoint replay never queues
/// (and so never flushes by itself); with hooks_with_drop_notice, a task that failed holding the
/// callback is noticed at once, so a retried backward flushes at its own end. Hooks without them keep
/// the limits docs/graph_hooks.md lists.
template <class Hooks>
class engine_callback {
  static_assert(graph_hooks<Hooks>,
                "tequant: Hooks (argument of engine_callback) must model tequant::graph_hooks: "
                "bool in_backward() and bool queue_callback(void (*)(void*), void*) - see docs/graph_hooks.md");
  static_assert(std::is_nothrow_move_constructible_v<Hooks>,
                "tequant: Hooks (argument of engine_callback) must be nothrow move constructible");

 public:
  using policy_kind = boundary_kind;
  using hooks_type = Hooks;

  engine_callback() = default;
  explicit engine_callback(Hooks h) noexcept : hooks_(std::move(h)) {}
  engine_callback(engine_callback&& o) noexcept
      : hooks_(std::move(o.hooks_)), queued_(o.queued_.load(std::memory_order_relaxed)) {}
  engine_callback& operator=(engine_callback&&) = delete;

  Hooks& hooks() noexcept { return hooks_; }
  const Hooks& hooks() const noexcept { return hooks_; }

  bool in_backward() const { return static_cast<bool>(hooks_.in_backward()); }
  bool engine_grad_enabled() const
    requires hooks_with_grad_mode<Hooks>
  {
    return static_cast<bool>(hooks_.grad_enabled());
  }
  void check_attached() const {
    if constexpr (hooks_with_attachment<Hooks>)
      detail::require(static_cast<bool>(hooks_.attached()),
                      "engine_callback: its hooks are not attached to an engine, so no backward task would ever "
                      "flush; build the manager with engine_callback<Hooks>(hooks) where hooks point at your engine");
  }

  template <class Port>
  void on_request(Port& port) {
    port.mark_pending();
    // Queued (on this task or an enclosing one): further requests change nothing until the task's end.
    if (queued_.load(std::memory_order_acquire) || queue(port)) port.settle();
  }
  /// A reentrant checkpoint replays inside the outer task before its nested backward: queuing now puts
  /// the callback on the outer task, so the nested task's requests find it queued.
  template <class Port>
  void on_replay_enter(Port& port) {
    if (!queued_.load(std::memory_order_acquire)) queue(port);
  }
  /// Outside any task: a callback still marked queued belonged to a task that has ended.
  template <class Port>
  void on_top_level_entry(Port& port) {
    queued_.store(false, std::memory_order_release);
    port.flush();
  }
  /// A scope opened inside a task leaves the flush to that task's end (for a nested task: to the
  /// outermost task's later requests or the next top-level entry).
  template <class Port>
  bool on_scope_enter(Port& port) {
    if (!in_backward()) {
      queued_.store(false, std::memory_order_release);
      return false;
    }
    return queue(port) || nested();
  }
  template <class Port>
  void on_scope_exit(Port& port, bool handed_over) {
    if (!handed_over) port.flush();
  }
  template <class Port>
  void on_defer(Port&) const {
    detail::require(!in_backward(),
                    "defer_weight_grad() inside a backward task but outside backward_scope() under engine_callback: "
                    "the task's end would flush the backward update before the deferred work runs; open "
                    "manager.backward_scope() around the backward() call itself and run "
                    "run_deferred_weight_grads() inside that same scope");
  }
  template <class Port>
  void on_task_end(Port& port) {
    queued_.store(false, std::memory_order_release);
    if (!port.in_scope()) port.flush();
  }
  template <class Port>
  void on_task_dropped(Port&) noexcept {
    queued_.store(false, std::memory_order_release);
  }

 private:
  bool nested() const {
    if constexpr (hooks_with_task_depth<Hooks>)
      return hooks_.task_depth() != 0;
    else
      return false;
  }

  // Queues the flush on the current task unless one is queued already (on this task or an enclosing
  // one) or the current task is nested. Returns whether a callback is queued now.
  template <class Port>
  bool queue(Port& port) {
    if (!in_backward() || nested()) return false;
    if (queued_.exchange(true, std::memory_order_acq_rel)) return true;
    bool queued = false;
    try {
      if constexpr (hooks_with_drop_notice<Hooks>)
        queued = static_cast<bool>(hooks_.queue_callback(port.task_end(), port.task_dropped(), port.context()));
      else
        queued = static_cast<bool>(hooks_.queue_callback(port.task_end(), port.context()));
    } catch (...) {
      queued_.store(false, std::memory_order_release);
      throw;
    }
    if (!queued) queued_.store(false, std::memory_order_release);
    return queued;
  }

  TEQUANT_NO_UNIQUE_ADDRESS Hooks hooks_{};
  std::atomic<bool> queued_{false};
};

}  // namespace tequant
