// SPDX-License-Identifier: Apache-2.0
// The state every boundary policy shares (the pending flag, backward scopes, the recovery after a
// logical backward that raised) and the port through which a policy acts on it. The manager forwards
// its events here; the policy decides what each event does.
#pragma once
#include <atomic>
#include <cstdint>
#include <utility>

#include "tequant/boundary/concepts.hpp"
#include "tequant/config.hpp"
#include "tequant/manager_types.hpp"

namespace tequant {

/// What a policy's on_module_forward sees: whether the module's forward counts (a quantized forward
/// with gradients that will run backward) and whether it runs inside a checkpoint replay.
struct forward_event {
  bool counts = false;
  bool in_replay = false;
};

namespace detail {
struct no_region_memo {};

template <class P>
struct region_memo_of {
  using type = no_region_memo;
};
template <class P>
  requires requires(P& p) { p.on_autocast_enter(std::uint32_t{}); }
struct region_memo_of<P> {
  using type = decltype(std::declval<P&>().on_autocast_enter(std::uint32_t{}));
};
}  // namespace detail

/// Owns the backward flush of one manager for the boundary policy `Policy`, and is the port the
/// policy's handlers act through:
///   mark_pending()           a backward update is needed (idempotent, thread-safe, no allocation)
///   pending()                whether one is needed
///   flush()                  run it now (no-op when none; on failure it stays pending and the
///                            exception propagates)
///   in_scope()               inside backward_scope()
///   settle()                 from on_request: a further request would change nothing until the next
///                            flush, scope entry or exit, top-level entry, task end or drop, or state
///                            load (these unsettle), so requests skip the policy (one load). A policy
///                            whose other handlers (on_replay_enter, on_defer, on_module_forward, the
///                            autocast events) change what on_request would do must not call it
///   recover_at_next_entry()  flush at the next top-level autocast entry whatever the policy does there
///   task_end(), task_dropped(), context()   the callback an engine runs at a task's end (or calls when
///                            it drops it), routed back to the policy's on_task_end / on_task_dropped
/// It does not move: engines hold callbacks that point at it.
template <class Policy>
class flush_control {
 public:
  /// Runs the backward update of the manager behind `ctx` (reduction, update, counters); may throw.
  using runner = void (*)(void*);

  flush_control(Policy policy, runner run, void* ctx) noexcept
      : policy_(std::move(policy)), run_(run), run_ctx_(ctx) {}
  flush_control(const flush_control&) = delete;
  flush_control& operator=(const flush_control&) = delete;

  Policy& policy() noexcept { return policy_; }
  const Policy& policy() const noexcept { return policy_; }

  // ---- the port ---------------------------------------------------------------------------------------

  void mark_pending() noexcept {
    // Load first: many threads requesting at once then share the cache line instead of bouncing it.
    if (!pending_.load(std::memory_order_relaxed)) pending_.store(true, std::memory_order_release);
  }
  bool pending() const noexcept { return pending_.load(std::memory_order_acquire); }
  void flush() {
    // Unsettled on both sides of the exchange: a request that settles while the flag clears either
    // sees it cleared (and unsettles itself) or is unsettled here after it.
    unsettle();
    if (!pending_.exchange(false, std::memory_order_seq_cst)) return;
    unsettle();
    try {
      run_(run_ctx_);
    } catch (...) {
      pending_.store(true, std::memory_order_release);  // the next boundary retries
      throw;
    }
  }
  bool in_scope() const noexcept { return scope_depth_.load(std::memory_order_relaxed) != 0; }
  void settle() noexcept {
    settled_.store(true, std::memory_order_seq_cst);
    if (!pending_.load(std::memory_order_seq_cst)) unsettle();  // a flush cleared it meanwhile
  }
  void recover_at_next_entry() noexcept { recover_ = true; }
  static constexpr void (*task_end() noexcept)(void*) { return &task_end_thunk; }
  static constexpr void (*task_dropped() noexcept)(void*) { return &task_dropped_thunk; }
  void* context() noexcept { return this; }

  // ---- events from the manager ------------------------------------------------------------------------

  /// A module backward asks for the update. The hot path, once a request settled (inside a scope, or
  /// where the policy said so): one relaxed load, inlined; the rest out of line.
  TEQUANT_ALWAYS_INLINE void request() {
    if (settled_.load(std::memory_order_relaxed)) [[likely]]
      return;
    unsettled_request();
  }
  TEQUANT_ALWAYS_INLINE void request(backward_ticket ticket) {
    if (settled_.load(std::memory_order_relaxed)) [[likely]]
      return;
    unsettled_request(ticket);
  }

  backward_ticket module_forward(forward_event e) {
    if constexpr (requires { policy_.on_module_forward(e); })
      return policy_.on_module_forward(e);
    else
      return {};
  }

  /// What an autocast region keeps for the policy until its exit (nothing, for most policies).
  using region_memo = typename detail::region_memo_of<Policy>::type;
  region_memo autocast_enter(std::uint32_t depth) noexcept {
    if constexpr (requires { policy_.on_autocast_enter(depth); })
      return policy_.on_autocast_enter(depth);
    else
      return {};
  }
  void autocast_exit(region_memo memo) noexcept {
    if constexpr (requires { policy_.on_autocast_exit(memo); }) policy_.on_autocast_exit(memo);
  }

  /// An autocast region opens at depth 0. Outside any backward, scope and replay it is where a failed
  /// logical backward's update runs, and where the policy may flush.
  void top_level_entry(bool in_replay) {
    if (in_replay || in_scope() || in_backward()) return;
    unsettle();
    if (recover_) {
      flush();  // a failure keeps the recovery for the next entry (and the update pending)
      recover_ = false;
    }
    if constexpr (requires { policy_.on_top_level_entry(*this); }) policy_.on_top_level_entry(*this);
  }

  /// backward_scope() opens. The outermost one marks the update pending unconditionally, so that
  /// every rank joins the collective even if none of its modules ran backward.
  void scope_enter() {
    if (scope_depth_.load(std::memory_order_relaxed) == 0) {
      unsettle();
      bool handed = false;
      if constexpr (requires { policy_.on_scope_enter(*this); }) handed = policy_.on_scope_enter(*this);
      handed_over_ = handed;
      mark_pending();
    }
    scope_depth_.fetch_add(1, std::memory_order_relaxed);
  }

  /// backward_scope() closes. The outermost exit flushes unless the policy took the flush over (a
  /// task's end); while unwinding nothing runs (no collective) and the update waits for the next
  /// top-level autocast entry, as that step's update (ARCHITECTURE §3).
  void scope_exit(bool unwinding) {
    if (scope_depth_.fetch_sub(1, std::memory_order_relaxed) != 1) return;
    unsettle();  // outside the scope the policy answers requests again
    const bool handed = std::exchange(handed_over_, false);
    if (unwinding) {
      if constexpr (requires { policy_.on_failed_backward(*this); })
        policy_.on_failed_backward(*this);
      else
        recover_at_next_entry();
      return;
    }
    if constexpr (requires { policy_.on_scope_exit(*this, handed); })
      policy_.on_scope_exit(*this, handed);
    else
      flush();
  }

  /// A checkpoint replay opens (inside the task that will run its nested backward, if any).
  void replay_enter() {
    if constexpr (requires { policy_.on_replay_enter(*this); }) {
      if (!in_scope()) policy_.on_replay_enter(*this);  // (does not unsettle: see settle())
    }
  }

  /// defer_weight_grad() is called; the policy may refuse deferral where the work could not belong
  /// to the logical backward it came from.
  void defer() {
    if constexpr (requires { policy_.on_defer(*this); }) {
      if (!in_scope()) policy_.on_defer(*this);
    }
  }

  bool in_backward() const {
    if constexpr (requires { policy_.in_backward(); })
      return static_cast<bool>(policy_.in_backward());
    else
      return false;
  }

  /// The grad mode the manager acts on: its own, and the engine's where the policy can tell.
  bool grad_enabled(bool own) const {
    if constexpr (requires { policy_.engine_grad_enabled(); })
      return own && static_cast<bool>(policy_.engine_grad_enabled());
    else
      return own;
  }

  void check_attached() const {
    if constexpr (requires { policy_.check_attached(); }) policy_.check_attached();
  }

  std::uint32_t scope_depth() const noexcept { return scope_depth_.load(std::memory_order_relaxed); }
  /// Between steps only (state loading): the pending flag as saved.
  void restore_pending(bool p) noexcept {
    unsettle();
    pending_.store(p, std::memory_order_release);
  }

 private:
  void unsettle() noexcept { settled_.store(false, std::memory_order_seq_cst); }
  [[gnu::noinline]] void unsettled_request() {
    if (in_scope()) {
      mark_pending();
      settle();
      return;
    }
    policy_.on_request(*this);
  }
  [[gnu::noinline]] void unsettled_request(backward_ticket ticket) {
    if (in_scope()) {
      mark_pending();
      settle();
      return;
    }
    if constexpr (requires { policy_.on_request(*this, ticket); })
      policy_.on_request(*this, ticket);
    else
      policy_.on_request(*this);
  }
  static void task_end_thunk(void* self) {
    auto& c = *static_cast<flush_control*>(self);
    c.unsettle();
    if constexpr (requires { c.policy_.on_task_end(c); }) c.policy_.on_task_end(c);
  }
  static void task_dropped_thunk(void* self) noexcept {
    auto& c = *static_cast<flush_control*>(self);
    c.unsettle();
    if constexpr (requires { c.policy_.on_task_dropped(c); }) c.policy_.on_task_dropped(c);
  }

  TEQUANT_NO_UNIQUE_ADDRESS Policy policy_;
  runner run_;
  void* run_ctx_;
  std::atomic<bool> pending_{false};
  std::atomic<bool> settled_{false};  // a request would change nothing (settle()): requests return at once
  std::atomic<std::uint32_t> scope_depth_{0};
  bool handed_over_ = false;  // the outermost scope's flush belongs to the policy (a task's end)
  bool recover_ = false;      // a logical backward raised: flush at the next top-level entry
};

}  // namespace tequant
