// SPDX-License-Identifier: Apache-2.0
// The quantization manager: composes the parts (recipe, boundary, checkpoint, comm, backend, slot
// table) and sequences them. Every decision belongs to a part (ARCHITECTURE §6.1).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include "tequant/backend/concepts.hpp"
#include "tequant/boundary/concepts.hpp"
#include "tequant/boundary/deferred_work.hpp"
#include "tequant/checkpoint/concepts.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/comm/concepts.hpp"
#include "tequant/comm/single_process.hpp"
#include "tequant/config.hpp"
#include "tequant/detail/cast_handle_keys.hpp"
#include "tequant/detail/manager_parts.hpp"
#include "tequant/error.hpp"
#include "tequant/guards.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/concepts.hpp"
#include "tequant/slot_table.hpp"

namespace tequant {

struct host_backend;

namespace detail {
struct manager_access;
}  // namespace detail

/// Owns the quantization state of one model and moves it at the right boundaries (docs/api.md).
/// Recipe     how tensors are scaled (delayed_scaling<>, current_scaling, mxfp8_scaling, block_scaling, a user's)
/// Boundary   when the backward update is flushed (engine_callback<Hooks>, autocast_entry, explicit_scope, ...)
/// Checkpoint what activation recompute sees (stacked_recompute, no_recompute)
/// Comm       how staging amaxes are reduced across ranks (single_process, mpi_comm, nccl_comm, c10d_comm)
/// Backend    where state lives and casts run (host_backend, cuda_backend: stream-ordered, graph-capturable)
/// Threading: request_backward_update() and plan_cast() of backward slots may be called from several
/// threads at once; everything else belongs to the thread that drives the training loop.
template <class Recipe, class Boundary, class Checkpoint = stacked_recompute, class Comm = single_process,
          class Backend = host_backend>
class quantization_manager {
  using parts = detail::manager_parts<Recipe, Boundary, Checkpoint, Comm, Backend>;
  // (Named once here: no member type depends on the comm, and its check must still run.)
  static_assert(parts::valid_comm || !parts::valid_comm);
  using recipe_part = typename parts::recipe;
  using flush_part = typename parts::flush;
  using stack_part = typename parts::stack;
  friend struct detail::manager_access;
  friend class tequant::autocast_region<quantization_manager>;
  friend class tequant::grad_mode_guard<quantization_manager>;
  friend class tequant::backward_scope_guard<quantization_manager>;
  friend class tequant::frame_guard<quantization_manager, checkpoint_frame>;

 public:
  using recipe_type = Recipe;
  using boundary_type = Boundary;
  using checkpoint_type = Checkpoint;
  using comm_type = Comm;
  using backend_type = Backend;
  using params_type = typename parts::recipe_of::params;
  /// Per-bucket recipe state (std::vector of Recipe::state_for<Backend>), or an empty type.
  using recipe_state_type = typename parts::recipe_of::states;
  static constexpr bool is_stateful = parts::stateful;
  using bucket_info = tequant::bucket_info;
  using region_memo = typename detail::region_memo_of<Boundary>::type;
  /// Whether checkpoint_forward / checkpoint_replay exist (the Checkpoint policy's frames support recompute).
  static constexpr bool supports_recompute = recompute_stack<stack_part>;

  using autocast_region = tequant::autocast_region<quantization_manager>;
  using grad_mode_guard = tequant::grad_mode_guard<quantization_manager>;
  using backward_scope_guard = tequant::backward_scope_guard<quantization_manager>;
  using frame_guard = tequant::frame_guard<quantization_manager, checkpoint_frame>;

  // ---- construction --------------------------------------------------------------------------------

  /// Validates `params` (the recipe's rule) and, for hooks that can tell, that they reach an engine.
  explicit quantization_manager(params_type params = {}, Boundary boundary = {}, Comm comm = {}, Backend backend = {})
      : recipe_(detail::validated<parts::valid_recipe, Recipe>(std::move(params))),
        flush_(std::move(boundary), &run_backward_update_thunk, this),
        comm_(std::move(comm)),
        backend_(std::move(backend)) {
    if constexpr (parts::valid_boundary) flush_.check_attached();
  }
  // Callbacks queued on the engine and frames point at the manager: it stays where it was built.
  quantization_manager(const quantization_manager&) = delete;
  quantization_manager& operator=(const quantization_manager&) = delete;

  // ---- registration --------------------------------------------------------------------------------

  /// Registers a module with `num_gemms` GEMMs: 3 forward slots (input, weight, output) and 2 backward
  /// slots (grad_output, grad_input) per GEMM, in the buckets of (direction, group).
  module_handle register_module(std::string name, std::uint32_t num_gemms = 1, reduction_groups groups = {}) {
    detail::check_registration(table_, comm_, name, num_gemms, groups);
    // A new epoch first (it may throw; nothing has changed yet): the registration may move the recipe
    // state that bound handles point into, even when it fails half way.
    keys_.new_epoch();
    return table_.register_module(std::move(name), num_gemms, groups, recipe_.registering(backend_));
  }

  /// A cast handle of one forward / backward slot: plan_cast(handle) then costs one compare on its
  /// common path (a module binds its slots once, after registering). See cast_handle.
  forward_cast_handle bind(module_handle m, forward_role role, std::uint32_t gemm = 0) {
    return bind<direction::forward>(table_.slot(m, role, gemm));
  }
  backward_cast_handle bind(module_handle m, backward_role role, std::uint32_t gemm = 0) {
    return bind<direction::backward>(table_.slot(m, role, gemm));
  }
  /// The same for a slot id (its direction must be D).
  template <direction D>
  cast_handle<D> bind(slot_id s) {
    return keys_.bind<D>(s, this, table_, recipe_);
  }

  slot_id slot(module_handle m, forward_role role, std::uint32_t gemm = 0) const { return table_.slot(m, role, gemm); }
  slot_id slot(module_handle m, backward_role role, std::uint32_t gemm = 0) const { return table_.slot(m, role, gemm); }
  std::size_t module_count() const noexcept { return table_.module_count(); }
  const std::string& module_name(module_handle m) const { return table_.module(m, "module_name").name; }
  std::uint32_t num_gemms(module_handle m) const { return table_.module(m, "num_gemms").num_gemms; }
  std::size_t bucket_count() const noexcept { return table_.bucket_count(); }
  const bucket_info& bucket(std::uint32_t b) const { return table_.bucket(b); }

  // ---- regions and modes ---------------------------------------------------------------------------

  /// RAII autocast region; regions nest. A top-level entry is a boundary event; the forward update runs
  /// when an enabled region exits to depth 0 with gradients on, outside replays, not unwinding.
  autocast_region autocast(bool enabled = true) {
    if (depth_ == 0) {
      if constexpr (is_stateful) flush_.top_level_entry(frames_.in_replay());
    }
    // Only a region that can run the forward update at its exit (enabled, outermost, not in a replay)
    // needs to know whether that exit unwinds; an outermost region outside replays also counts for the
    // recording frames opened inside it (entry_uncaught()).
    const bool outer = depth_ == 0 && !frames_.in_replay();
    const int uncaught = outer && ((is_stateful && enabled) || supports_recompute) ? std::uncaught_exceptions() : -1;
    autocast_region r(this, enabled, enabled_, flush_.autocast_enter(depth_), uncaught);
    if (outer) region_uncaught_ = uncaught;
    enabled_ = enabled;
    ++depth_;
    if (!enabled) keys_.spoil();
    return r;
  }

  /// Sets the manager's grad mode (what torch.is_grad_enabled() is to TE) until the guard dies. Where
  /// the boundary's engine hooks report the engine's own grad mode, both must be on.
  grad_mode_guard grad_mode(bool enabled) noexcept {
    grad_mode_guard g(this, grad_);
    grad_ = enabled;
    return g;
  }
  bool grad_enabled() const { return flush_.grad_enabled(grad_); }
  /// True inside an enabled autocast region (the innermost region decides; a replay, its frame's record).
  bool quantization_enabled() const noexcept { return enabled_; }
  /// True while any checkpoint replay is open.
  bool in_replay() const noexcept { return frames_.in_replay(); }

  // ---- module forward / backward -------------------------------------------------------------------

  /// Called once per module forward; the boundary may hand the module's backward a ticket (only
  /// first_module_owner does: TE's ownership flag).
  backward_ticket module_forward(module_handle m, bool needs_backward = true) {
    (void)table_.module(m, "module_forward");
    return flush_.module_forward({enabled_ && grad_enabled() && needs_backward, frames_.in_replay()});
  }

  /// How the next cast of `slot` goes: the recipe's plan, then, for forward slots, the autocast state
  /// (disabled: high precision) and the checkpoint frames (a replay: the original forward's scale).
  TEQUANT_ALWAYS_INLINE cast_plan plan_cast(slot_id slot) {
    // One branch on the direction first: below it the direction is a constant, so the slot check and
    // the recipe's plan (its dtype) fold to the one direction.
    if (slot.dir == direction::forward) {
      table_.check_in<direction::forward>(slot, "plan_cast");
      const slot_id s{direction::forward, slot.bucket, slot.index};
      cast_plan plan = recipe_.plan(s);
      if (!enabled_) [[unlikely]] {
        plan.enabled = false;
        plan.amax = nullptr;
        return plan;
      }
      if (frames_.empty()) return plan;
      return in_frames(s, plan);
    }
    table_.check_in<direction::backward>(slot, "plan_cast");  // also refuses a direction that does not exist
    return recipe_.plan(slot_id{direction::backward, slot.bucket, slot.index});
  }

  /// The same plan as plan_cast(handle.slot()), kept in the handle until its next plan_cast. Common
  /// path: one compare of the handle's key with the manager's (detail/cast_handle_keys.hpp).
  template <direction D>
  TEQUANT_ALWAYS_INLINE const cast_plan& plan_cast(cast_handle<D>& handle) {
    // A reference, not a value: the paths meet in a pointer, and the caller loads only the fields it
    // reads (a 64-byte value made the compiler copy the whole plan through the stack on every cast).
    if constexpr (detail::keeps_plans<recipe_part>) {
      if (handle.key_ == keys_.key<D>()) [[likely]]
        return handle.kept_;
      if constexpr (D == direction::forward && recompute_stack<stack_part>) {
        // Inside checkpoint frames (they spoil the forward key): a handle of this epoch in an enabled
        // region takes the frames' plan here, as a slot id does, without the out-of-line call and its
        // owner and epoch tests (an epoch's key belongs to this manager alone).
        if (handle.key_ == keys_.epoch() && enabled_ && !frames_.empty())
          return detail::plan_forward_kept(frames_, slot_id{D, handle.slot_.bucket, handle.slot_.index}, handle.kept_,
                                           handle.last_, backend_, table_.slots(direction::forward), this, describer());
      }
    } else {
      if (handle.key_ == keys_.key<D>()) [[likely]] {
        handle.last_ = recipe_.plan(slot_id{D, handle.slot_.bucket, handle.slot_.index});
        return handle.last_;
      }
    }
    return plan_cast_slow(handle);
  }

  /// A module backward says "a backward update is needed". Idempotent and thread-safe; on its common
  /// path one relaxed load (no lock, no allocation). A no-op for stateless recipes.
  void request_backward_update() {
    if constexpr (is_stateful) flush_.request();
  }
  /// As above, with the ticket module_forward returned.
  void request_backward_update(backward_ticket ticket) {
    if constexpr (is_stateful) flush_.request(ticket);
  }

  /// RAII: the enclosed work is one logical backward, whose update the outermost exit flushes once (an
  /// exceptional exit: the next top-level autocast entry does). Entering marks the update pending.
  backward_scope_guard backward_scope() {
    flush_.scope_enter();
    return backward_scope_guard(this);
  }

  /// Registers backward_dw-style work (any callable with no arguments, moved in) to run later, inside
  /// the scope of the logical backward it belongs to. The boundary may refuse where that cannot hold.
  template <class F>
    requires std::is_invocable_v<std::decay_t<F>&>
  void defer_weight_grad(F&& work) {
    deferred_.add(std::forward<F>(work), [this] { flush_.defer(); });
  }

  /// Runs the deferred weight-gradient work in registration order, inside backward_scope() (before the
  /// update its exit flushes). After any error nothing stays registered.
  void run_deferred_weight_grads() { deferred_.run(flush_.scope_depth() != 0); }
  std::size_t deferred_weight_grads() const { return deferred_.size(); }

  /// Runs the pending backward update now (tests, custom loops). No-op when nothing is pending; on
  /// failure it stays pending and the exception propagates.
  void flush_backward_update() {
    if constexpr (is_stateful) flush_.flush();
  }

  // ---- activation recompute ------------------------------------------------------------------------

  /// Opens `frame` for its original forward, where the checkpoint is called (before the engine turns
  /// gradients off): it records only with gradients on here and `inputs_need_grad`.
  frame_guard checkpoint_forward(checkpoint_frame& frame, bool inputs_need_grad = true) {
    if constexpr (detail::can_checkpoint_forward<stack_part>()) {
      const bool active = grad_enabled() && inputs_need_grad;
      frames_.open_forward(frame, active, enabled_, this);
      keys_.spoil();
      const bool watch = active || !detail::close_ignores_unwinding<stack_part>;
      return frame_guard(this, &frame, enabled_, watch ? entry_uncaught() : -1);
    } else {
      return frame_guard(this, &frame, enabled_, -1);
    }
  }

  /// Reopens `frame` for its replay: forward casts use exactly what its original forward used, record
  /// no amax; no forward update, no flush (inside a backward task the boundary may act first).
  frame_guard checkpoint_replay(checkpoint_frame& frame) {
    if constexpr (detail::can_checkpoint_replay<stack_part>()) {
      constexpr bool checks_first = requires {
        frames_.require_replayable(frame, this);
        frames_.open_checked_replay(frame);
      };
      if constexpr (is_stateful) {
        if constexpr (requires { frames_.require_replayable(frame, this); })
          frames_.require_replayable(frame, this);  // a refused replay queues nothing
        flush_.replay_enter();
      }
      const bool prev = enabled_;
      if constexpr (is_stateful && checks_first)
        enabled_ = frames_.open_checked_replay(frame);  // checked above: once per replay
      else
        enabled_ = frames_.open_replay(frame, this);
      keys_.spoil();
      // Built in place: no move.
      return frame_guard(this, &frame, prev, !detail::close_ignores_unwinding<stack_part> ? entry_uncaught() : -1);
    } else {
      return frame_guard(this, &frame, enabled_, -1);
    }
  }

  // ---- state ---------------------------------------------------------------------------------------

  /// The live scale of a slot (a host read: on a device backend this synchronises).
  float scale(slot_id slot) const {
    table_.check(slot, "scale");
    return detail::scale_of<Recipe>(recipe_, slot);
  }

  /// The staging amax of a slot (what the next update will commit).
  float staging_amax(slot_id slot) const {
    table_.check(slot, "staging_amax");
    return detail::staging_amax_of<Recipe>(recipe_, slot);
  }

  manager_stats stats() const noexcept { return detail::stats_of(counters_, flush_, frames_, depth_); }

  const params_type& params() const noexcept { return recipe_.params(); }
  /// Per-bucket recipe state, indexed like bucket(b) (for export/import and tests). Cast handles keep
  /// pointers into it: write values, but replace or resize no bucket's state while handles are bound.
  recipe_state_type& recipe_state() noexcept { return recipe_.states(); }
  const recipe_state_type& recipe_state() const noexcept { return recipe_.states(); }
  Boundary& boundary() noexcept { return flush_.policy(); }
  Comm& comm() noexcept { return comm_; }
  Backend& backend() noexcept { return backend_; }

 private:
  // `uncaught`: std::uncaught_exceptions() at the region's entry, or -1 where the entry could not run
  // the update at its exit (only guards destroyed out of nesting order reach the update then: they
  // count as unwinding while any exception is in flight).
  void exit_autocast([[maybe_unused]] bool enabled, bool prev_enabled, region_memo memo, [[maybe_unused]] int uncaught) {
    if (--depth_ == 0) region_uncaught_ = -1;
    enabled_ = prev_enabled;
    if (!prev_enabled) keys_.spoil();
    flush_.autocast_exit(memo);
    if constexpr (is_stateful) {
      if (enabled && depth_ == 0 && grad_enabled() && !frames_.in_replay() &&
          std::uncaught_exceptions() <= (uncaught < 0 ? 0 : uncaught))
        run_update(direction::forward);
    }
  }
  void restore_grad_mode(bool prev) noexcept { grad_ = prev; }
  // The count a frame guard's exit compares with. Inside an outermost region, that region's entry count
  // (no fewer propagate while it is open; more only while an exception raised in it unwinds, so a frame
  // opened then counts as unwound too: docs/api.md): one runtime call per recording frame, not two.
  int entry_uncaught() const noexcept { return region_uncaught_ >= 0 ? region_uncaught_ : std::uncaught_exceptions(); }
  void exit_scope(bool unwinding) {
    flush_.scope_exit(unwinding);
    // Deferred work of a logical backward that raised must not leak into the next one.
    if (unwinding && flush_.scope_depth() == 0) deferred_.clear();
  }
  TEQUANT_ALWAYS_INLINE void exit_frame(checkpoint_frame& frame, bool prev_enabled, bool unwinding) noexcept {
    if constexpr (recompute_stack<stack_part>) frames_.close(frame, unwinding);
    enabled_ = prev_enabled;  // (a closing frame leaves the key spoilt since its opening)
  }

  // ---- the cast path off its common path ------------------------------------------------------------

  // Out of line, so that plan_cast(handle) inlines as one compare and a return (cast_handle_keys.hpp).
  template <direction D>
  [[gnu::noinline]] const cast_plan& plan_cast_slow(cast_handle<D>& h) {
    return keys_.plan_cast_slow(h, this, table_, recipe_, enabled_, !frames_.empty(),
                                [this](slot_id s, const cast_plan& p) { return in_frames(s, p); });
  }
  // What the frames make of a forward plan (both plan_cast overloads). Returned as it comes (no copy
  // of the 64-byte plan through a local).
  TEQUANT_ALWAYS_INLINE cast_plan in_frames(slot_id s, const cast_plan& plan) {
    return frames_.plan_forward(s, plan, backend_, table_.slots(direction::forward), this, describer());
  }
  // How the frames name a slot in their errors.
  auto describer() const noexcept {
    return [this](slot_id x) { return table_.describe(x); };
  }

  // The recipe's reduce-and-update of one direction's buckets, counted; flush_control runs the backward one.
  void run_update(direction d) { counters_.count(d, recipe_.reduce_and_update(d, table_, comm_)); }
  static void run_backward_update_thunk(void* self) {
    if constexpr (is_stateful) static_cast<quantization_manager*>(self)->run_update(direction::backward);
  }

  detail::slot_table table_;
  recipe_part recipe_;
  flush_part flush_;
  TEQUANT_NO_UNIQUE_ADDRESS stack_part frames_;
  detail::deferred_work deferred_;
  detail::update_counters counters_;
  std::uint32_t depth_ = 0;  // autocast nesting
  int region_uncaught_ = -1;  // std::uncaught_exceptions() at the open outermost region's entry, or -1
  bool grad_ = true;
  bool enabled_ = false;  // innermost autocast region is enabled
  TEQUANT_NO_UNIQUE_ADDRESS Comm comm_;
  TEQUANT_NO_UNIQUE_ADDRESS typename parts::backend backend_;
  detail::cast_handle_keys keys_;
};

}  // namespace tequant
