// SPDX-License-Identifier: Apache-2.0
// The quantization manager: composes the parts (recipe, boundary, checkpoint, comm, backend, slot
// table) and sequences them. Every decision belongs to a part (ARCHITECTURE §6.1).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <forward_list>
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

/// Owns the quantization state of one model and moves it at the right boundaries.
///
/// Recipe     how tensors are scaled (delayed_scaling<>, current_scaling, mxfp8_scaling, block_scaling, a user's)
/// Boundary   when the backward update is flushed (engine_callback<Hooks>, autocast_entry,
///            explicit_scope, first_module_owner, a user's)
/// Checkpoint what activation recompute sees (stacked_recompute, no_recompute)
/// Comm       how staging amaxes are reduced across ranks (single_process, mpi_comm, nccl_comm, c10d_comm)
/// Backend    where state lives and casts run (host_backend, cuda_backend)
///
/// Threading: request_backward_update() and plan_cast() of backward slots may be called from several
/// threads at once; everything else belongs to the thread that drives the training loop.
///
/// Device backends (cuda_backend): scales, staging amaxes and checkpoint snapshots live in device
/// memory and every cast plan holds device pointers; updates, flushes and snapshots are stream-ordered
/// work that never waits for the device, so a training step can be captured in a CUDA graph. Counters
/// and flags stay on the host. scale() and staging_amax() read device memory (a synchronisation).
template <class Recipe, class Boundary, class Checkpoint = stacked_recompute, class Comm = single_process,
          class Backend = host_backend>
class quantization_manager {
  static constexpr bool valid_backend = detail::check_backend<Backend>();
  static constexpr bool valid_recipe = detail::check_recipe_if<valid_backend, Recipe, Backend>();
  static constexpr bool valid_boundary = detail::check_boundary<Boundary>();
  static constexpr bool valid_checkpoint = detail::check_checkpoint_if<valid_backend, Checkpoint, Backend>();
  static constexpr bool valid_comm = detail::check_comm<Comm>();
  // (Named once here: no member type depends on the comm, and its check must still run.)
  static_assert(valid_comm || !valid_comm);

  using recipe_part = typename detail::recipe_part_of<valid_recipe, Recipe, Backend>::type;
  using flush_part = typename detail::flush_part_of<valid_boundary, Boundary>::type;
  using stack_part = typename detail::stack_part_of<valid_checkpoint, Checkpoint, Backend>::type;
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
  using params_type = typename detail::recipe_part_of<valid_recipe, Recipe, Backend>::params;
  /// Per-bucket recipe state (std::vector of Recipe::state_for<Backend>), or an empty type.
  using recipe_state_type = typename detail::recipe_part_of<valid_recipe, Recipe, Backend>::states;
  static constexpr bool is_stateful = valid_recipe && detail::has_state<Recipe, Backend>;
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
      : recipe_(validated(std::move(params))),
        flush_(std::move(boundary), &run_backward_update_thunk, this),
        comm_(std::move(comm)),
        backend_(std::move(backend)) {
    if constexpr (valid_boundary) flush_.check_attached();
  }
  // Callbacks queued on the engine and frames point at the manager: it stays where it was built.
  quantization_manager(const quantization_manager&) = delete;
  quantization_manager& operator=(const quantization_manager&) = delete;

  // ---- registration --------------------------------------------------------------------------------

  /// Registers a module with `num_gemms` GEMMs: 3 forward slots (input, weight, output) and 2 backward
  /// slots (grad_output, grad_input) per GEMM, in the buckets of (direction, group).
  module_handle register_module(std::string name, std::uint32_t num_gemms = 1, reduction_groups groups = {}) {
    detail::require(num_gemms >= 1, "register_module('", name, "'): num_gemms must be >= 1");
    detail::require(table_.module_count() < 0xFFFFFFFFu, "register_module('", name, "'): too many modules");
    if constexpr (requires(const Comm& c) { { c.groups() } -> std::convertible_to<std::uint32_t>; })
      detail::require(groups.forward < comm_.groups() && groups.backward < comm_.groups(), "register_module('", name,
                      "'): reduction groups (forward ", groups.forward, ", backward ", groups.backward,
                      ") must be below the communicator's ", comm_.groups(), " groups");
    // A new epoch first (it may throw; nothing has changed yet): the registration may move the recipe
    // state that bound handles point into, even when it fails half way.
    new_epoch();
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
    if (s.dir != D) [[unlikely]]
      detail::fail("bind<", to_string(D), ">: slot (bucket ", s.bucket, ", index ", s.index, ") is a ",
                   to_string(s.dir), " slot");
    cast_handle<D> h;
    h.owner_ = this;
    h.slot_ = s;
    rebind(h, "bind");
    return h;
  }

  slot_id slot(module_handle m, forward_role role, std::uint32_t gemm = 0) const { return table_.slot(m, role, gemm); }
  slot_id slot(module_handle m, backward_role role, std::uint32_t gemm = 0) const { return table_.slot(m, role, gemm); }
  std::size_t module_count() const noexcept { return table_.module_count(); }
  const std::string& module_name(module_handle m) const { return table_.module(m, "module_name").name; }
  std::uint32_t num_gemms(module_handle m) const { return table_.module(m, "num_gemms").num_gemms; }
  std::size_t bucket_count() const noexcept { return table_.bucket_count(); }
  const bucket_info& bucket(std::uint32_t b) const { return table_.bucket(b); }

  // ---- regions and modes ---------------------------------------------------------------------------

  /// RAII autocast region; regions nest. A top-level entry outside any backward, scope and replay is a
  /// boundary event (the policy may flush there). The forward update runs when an enabled region exits
  /// to depth 0 with gradients enabled, outside any replay and not during stack unwinding.
  autocast_region autocast(bool enabled = true) {
    if (depth_ == 0) {
      if constexpr (is_stateful) flush_.top_level_entry(frames_.in_replay());
    }
    // Only a region that can run the forward update at its exit (enabled, outermost, not in a replay)
    // needs to know whether that exit unwinds.
    const bool watch = is_stateful && enabled && depth_ == 0 && !frames_.in_replay();
    autocast_region r(this, enabled, enabled_, flush_.autocast_enter(depth_), watch ? std::uncaught_exceptions() : -1);
    enabled_ = enabled;
    ++depth_;
    if (!enabled) spoil_fast_key();
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
  /// (outside an enabled region: high precision, nothing recorded) and the checkpoint frames (inside a
  /// replay: the original forward's scale, nothing recorded; inside a recording frame: its snapshot
  /// keeps what this cast uses). Backward casts belong to a forward that quantized.
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

  /// The same plan as plan_cast(handle.slot()), through a handle from bind(); it lies in the handle,
  /// valid until the handle's next plan_cast. Common path (the handle is bound in the current epoch,
  /// and for forward slots an enabled region with no checkpoint frame open): one compare of the
  /// handle's key with the manager's, then the plan the handle keeps. Else, out of line: a handle of
  /// another manager (or none) throws; a stale one re-binds (the slot checked again, the recipe's plan
  /// taken again); then the autocast state and the frames, exactly as for slot ids.
  template <direction D>
  TEQUANT_ALWAYS_INLINE const cast_plan& plan_cast(cast_handle<D>& handle) {
    // A reference, not a value: the paths meet in a pointer, and the caller loads only the fields it
    // reads (a 64-byte value made the compiler copy the whole plan through the stack on every cast).
    if constexpr (caches_plans) {
      if (handle.key_ == fast_key<D>()) [[likely]]
        return handle.kept_;
    } else {
      if (handle.key_ == fast_key<D>()) [[likely]] {
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

  /// RAII: the enclosed work is one logical backward. Entering the outermost scope marks the update
  /// pending (every rank joins the collective); inside, requests only mark it pending; the outermost
  /// exit flushes once (a scope opened inside a backward task leaves that to the task's end). An
  /// exceptional exit flushes nothing: the update runs at the next top-level autocast entry.
  backward_scope_guard backward_scope() {
    flush_.scope_enter();
    return backward_scope_guard(this);
  }

  /// Registers backward_dw-style work (a delayed weight gradient) to run later, inside the scope of
  /// the logical backward it belongs to. The boundary may refuse where that cannot hold.
  /// `work` is any callable with no arguments (a lambda, a std::function); it is moved in.
  template <class F>
    requires std::is_invocable_v<std::decay_t<F>&>
  void defer_weight_grad(F&& work) {
    detail::require(!detail::empty_work(work), "defer_weight_grad: empty function");
    detail::deferred_item item(std::forward<F>(work));
    try {
      flush_.defer();
    } catch (...) {
      deferred_.clear();
      throw;
    }
    deferred_.add(std::move(item));
  }

  /// Runs the deferred weight-gradient work in registration order, inside backward_scope() (before the
  /// update its exit flushes). After any error nothing stays registered.
  void run_deferred_weight_grads() {
    if (flush_.scope_depth() == 0) {
      deferred_.clear();
      detail::fail("run_deferred_weight_grads() outside backward_scope(): deferred weight-gradient work belongs to "
                   "the logical backward; open manager.backward_scope() around the backward() call itself and run "
                   "the deferred work inside that same scope (the registered work was dropped)");
    }
    deferred_.run();
  }
  std::size_t deferred_weight_grads() const { return deferred_.size(); }

  /// Runs the pending backward update now (tests, custom loops). No-op when nothing is pending; on
  /// failure it stays pending and the exception propagates.
  void flush_backward_update() {
    if constexpr (is_stateful) flush_.flush();
  }

  // ---- activation recompute ------------------------------------------------------------------------

  /// Opens `frame` for its original forward. Open it where the checkpoint is called, before the engine
  /// switches gradients off for a reentrant forward: the frame records only when gradients are enabled
  /// here and `inputs_need_grad`; otherwise it inherits the enclosing context.
  frame_guard checkpoint_forward(checkpoint_frame& frame, bool inputs_need_grad = true) {
    static_assert(recompute_stack<stack_part>,
                  "tequant: checkpoint_forward() needs a Checkpoint policy that supports recompute "
                  "(stacked_recompute); this manager's Checkpoint (3rd argument of quantization_manager) has "
                  "no frame stack (no_recompute)");
    if constexpr (recompute_stack<stack_part>) {
      const bool active = grad_enabled() && inputs_need_grad;
      frames_.open_forward(frame, active, enabled_, this);
      spoil_fast_key();
      return frame_guard(this, &frame, enabled_, active || !close_ignores_unwinding);
    } else {
      return frame_guard(this, &frame, enabled_);
    }
  }

  /// Reopens `frame` for its replay: forward casts use exactly what its original forward used, under
  /// the autocast state it recorded, and record no amax; no forward update runs and nothing is flushed.
  /// Inside a backward task, the boundary may act first (engine_callback queues on this outer task).
  frame_guard checkpoint_replay(checkpoint_frame& frame) {
    static_assert(recompute_stack<stack_part>,
                  "tequant: checkpoint_replay() needs a Checkpoint policy that supports recompute "
                  "(stacked_recompute); this manager's Checkpoint (3rd argument of quantization_manager) has "
                  "no frame stack (no_recompute)");
    if constexpr (recompute_stack<stack_part>) {
      if constexpr (is_stateful) {
        if constexpr (requires { frames_.require_replayable(frame, this); })
          frames_.require_replayable(frame, this);  // a refused replay queues nothing
        flush_.replay_enter();
      }
      const bool prev = enabled_;
      enabled_ = frames_.open_replay(frame, this);
      spoil_fast_key();
      return frame_guard(this, &frame, prev, !close_ignores_unwinding);  // built in place: no move
    } else {
      return frame_guard(this, &frame, enabled_);
    }
  }

  // ---- state ---------------------------------------------------------------------------------------

  /// The live scale of a slot (a host read: on a device backend this synchronises).
  float scale(slot_id slot) const {
    table_.check(slot, "scale");
    if constexpr (requires { recipe_.scale(slot); })
      return recipe_.scale(slot);
    else
      detail::fail("scale: recipe ", Recipe::name, " keeps no per-slot scale; its scales are computed per cast");
  }

  /// The staging amax of a slot (what the next update will commit).
  float staging_amax(slot_id slot) const {
    table_.check(slot, "staging_amax");
    if constexpr (requires { recipe_.staging_amax(slot); })
      return recipe_.staging_amax(slot);
    else
      detail::fail("staging_amax: recipe ", Recipe::name, " keeps no staging amax");
  }

  manager_stats stats() const noexcept {
    manager_stats r;
    r.forward_updates = forward_updates_.load(std::memory_order_relaxed);
    r.backward_updates = backward_updates_.load(std::memory_order_relaxed);
    r.collectives = collectives_.load(std::memory_order_relaxed);
    r.pending = flush_.pending();
    r.autocast_depth = depth_;
    r.scope_depth = flush_.scope_depth();
    r.checkpoint_depth = frames_.depth();
    r.outstanding_snapshots = frames_.outstanding();
    return r;
  }

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
  void exit_autocast(bool enabled, bool prev_enabled, region_memo memo, int uncaught) {
    --depth_;
    enabled_ = prev_enabled;
    if (!prev_enabled) spoil_fast_key();
    flush_.autocast_exit(memo);
    if constexpr (is_stateful) {
      if (enabled && depth_ == 0 && grad_enabled() && !frames_.in_replay() &&
          std::uncaught_exceptions() <= (uncaught < 0 ? 0 : uncaught)) {
        collectives_.fetch_add(recipe_.reduce_and_update(direction::forward, table_, comm_), std::memory_order_relaxed);
        forward_updates_.fetch_add(1, std::memory_order_relaxed);
      }
    } else {
      (void)enabled;
      (void)uncaught;
    }
  }
  void restore_grad_mode(bool prev) noexcept { grad_ = prev; }
  void exit_scope(bool unwinding) {
    flush_.scope_exit(unwinding);
    // Deferred work of a logical backward that raised must not leak into the next one.
    if (unwinding && flush_.scope_depth() == 0) deferred_.clear();
  }
  TEQUANT_ALWAYS_INLINE void exit_frame(checkpoint_frame& frame, bool prev_enabled, bool unwinding) noexcept {
    if constexpr (recompute_stack<stack_part>) frames_.close(frame, unwinding);
    enabled_ = prev_enabled;  // (a closing frame leaves the key spoilt since its opening)
  }

  // ---- cast handles: epochs and keys ------------------------------------------------------------------
  // A handle keeps the recipe's plan, which points into recipe state that a registration or a state
  // load may move. Each of those starts a new epoch; an epoch's key is the address of a cell this
  // manager keeps until it dies, so no two epochs of live managers share a key, and a handle's key
  // equals the manager's only if that manager bound it in its current epoch. Keys are 8-aligned:
  // key | 1 matches no handle. The forward key is the epoch's only where a forward cast takes the kept
  // plan as it is (an enabled region, no frame open): whatever may end that (a disabled region, a
  // frame opening, a new epoch) spoils it, one `or`; the slow path restores it when it holds again,
  // so closing frames and entering enabled regions cost nothing (the next forward cast goes out of
  // line once).

  static constexpr bool caches_plans = requires { requires recipe_part::stable_plans; };

  void new_epoch() {
    epoch_cells_.emplace_front(0);
    epoch_ = reinterpret_cast<std::uintptr_t>(&epoch_cells_.front());
    forward_key_ = epoch_ | 1u;
  }
  void spoil_fast_key() noexcept { forward_key_ |= 1u; }
  template <direction D>
  TEQUANT_ALWAYS_INLINE std::uintptr_t fast_key() const noexcept {
    if constexpr (D == direction::forward) return forward_key_;
    else return epoch_;
  }
  template <direction D>
  void rebind(cast_handle<D>& h, const char* where) {
    table_.check_in<D>(h.slot_, where);
    if constexpr (caches_plans) h.kept_ = recipe_.plan(slot_id{D, h.slot_.bucket, h.slot_.index});
    h.key_ = epoch_;
  }
  // The plan lies in the handle: the kept one (a backward slot of a recipe with stable plans) or the
  // handle's last_ (what the autocast state and the frames made of it; a recipe's fresh plan).
  template <direction D>
  [[gnu::noinline]] const cast_plan& plan_cast_slow(cast_handle<D>& h) {
    if (h.owner_ != this) [[unlikely]]
      foreign_handle(D, h.slot_, h.owner_ == nullptr);
    if (h.key_ != epoch_) rebind(h, "plan_cast");
    if constexpr (D == direction::forward)
      if (enabled_ && frames_.empty()) forward_key_ = epoch_;  // the common path holds again
    const slot_id s{D, h.slot_.bucket, h.slot_.index};
    if constexpr (D == direction::backward && caches_plans) {
      return h.kept_;
    } else {
      cast_plan& plan = h.last_;
      if constexpr (caches_plans) plan = h.kept_;
      else plan = recipe_.plan(s);
      if constexpr (D == direction::forward) {
        if (!enabled_) [[unlikely]] {
          plan.enabled = false;
          plan.amax = nullptr;
        } else if (!frames_.empty()) {
          plan = in_frames(s, plan);
        }
      }
      return plan;
    }
  }
  [[noreturn, gnu::noinline, gnu::cold]] static void foreign_handle(direction d, slot_id s, bool unbound) {
    detail::fail("plan_cast: a ", to_string(d), " cast handle (bucket ", s.bucket, ", index ", s.index, ") ",
                 unbound ? "that no manager bound (default-constructed)" : "that another manager bound",
                 "; bind it with this manager's bind()");
  }
  // What the frames make of a forward plan (both plan_cast overloads). Returned as it comes (no copy
  // of the 64-byte plan through a local).
  TEQUANT_ALWAYS_INLINE cast_plan in_frames(slot_id s, const cast_plan& plan) {
    return frames_.plan_forward(s, plan, backend_, table_.slots(direction::forward), this,
                                [this](slot_id x) { return table_.describe(x); });
  }

  // Whether the frame stack's close() ignores `unwinding` except for recording frames (stacked_recompute's
  // does): then guards of replays and inactive frames need not ask std::uncaught_exceptions().
  static constexpr bool close_ignores_unwinding =
      requires { requires stack_part::unwinding_matters_only_when_recording; };

  // (A part that failed its check has reported already: nothing more is asked of it.)
  static params_type validated(params_type p) {
    if constexpr (valid_recipe) Recipe::validate(p);
    return p;
  }

  // What flush_control runs when it flushes: the recipe's reduce-and-update of the backward buckets.
  static void run_backward_update_thunk(void* self) {
    auto& m = *static_cast<quantization_manager*>(self);
    if constexpr (is_stateful) {
      m.collectives_.fetch_add(m.recipe_.reduce_and_update(direction::backward, m.table_, m.comm_),
                               std::memory_order_relaxed);
      m.backward_updates_.fetch_add(1, std::memory_order_relaxed);
    }
  }

  detail::slot_table table_;
  recipe_part recipe_;
  flush_part flush_;
  TEQUANT_NO_UNIQUE_ADDRESS stack_part frames_;
  detail::deferred_work deferred_;
  std::atomic<std::uint64_t> forward_updates_{0}, backward_updates_{0}, collectives_{0};
  std::uint32_t depth_ = 0;  // autocast nesting
  bool grad_ = true;
  bool enabled_ = false;  // innermost autocast region is enabled
  TEQUANT_NO_UNIQUE_ADDRESS Comm comm_;
  TEQUANT_NO_UNIQUE_ADDRESS std::conditional_t<valid_backend, Backend, detail::invalid_part> backend_;
  // Cast handles (above): the cells whose addresses are the epochs' keys; before any registration the
  // key is this list's own address (no cell has it).
  std::forward_list<std::uint64_t> epoch_cells_;
  std::uintptr_t epoch_ = reinterpret_cast<std::uintptr_t>(&epoch_cells_);
  std::uintptr_t forward_key_ = epoch_ | 1u;  // enabled_ is false
};

}  // namespace tequant
