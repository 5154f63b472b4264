// SPDX-License-Identifier: Apache-2.0
// The quantization manager: decides WHEN quantization state moves (ARCHITECTURE §3, §4). HOW a
// recipe reduces and updates its state is the recipe's business (recipe/, backend/).
#pragma once
#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tequant/backend/concepts.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/boundary/concepts.hpp"
#include "tequant/checkpoint/concepts.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/comm/concepts.hpp"
#include "tequant/comm/layout.hpp"
#include "tequant/comm/single_process.hpp"
#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/concepts.hpp"

namespace tequant {

namespace detail {

/// persistence/ reads the whole state and commits a loaded one in one noexcept step (strong guarantee).
struct manager_access;

// After a failed policy check, these placeholders stand in for the policy's member types so that the
// user sees one `tequant:` static_assert and not a cascade (style guide P5).
struct invalid_policy_placeholder {};

template <class R>
struct params_of {
  using type = invalid_policy_placeholder;
};
template <scaling_recipe R>
struct params_of<R> {
  using type = typename R::params_type;
};

template <class R>
inline constexpr bool recipe_is_stateful = false;
template <scaling_recipe R>
inline constexpr bool recipe_is_stateful<R> = static_cast<bool>(R::is_stateful);

// Stateful recipes keep one state object per bucket; stateless recipes keep their (empty) state type.
template <class R, class B>
struct recipe_state_of {
  using type = invalid_policy_placeholder;
};
template <class R, class B>
  requires(scaling_recipe<R> && execution_backend<B> && !R::is_stateful)
struct recipe_state_of<R, B> {
  using type = typename R::template state_for<B>;
};
template <class R, class B>
  requires(stateful_recipe<R> && execution_backend<B>)
struct recipe_state_of<R, B> {
  using type = std::vector<typename R::template state_for<B>>;
};

template <class B>
struct boundary_traits {
  static constexpr bool flushes_at_autocast_entry = false, requests_need_scope = false, first_module_owns = false,
                        uses_graph_hooks = false;
};
template <boundary_strategy B>
struct boundary_traits<B> {
  static constexpr bool flushes_at_autocast_entry = B::flushes_at_autocast_entry;
  static constexpr bool requests_need_scope = B::requests_need_scope;
  static constexpr bool first_module_owns = B::first_module_owns;
  static constexpr bool uses_graph_hooks = B::uses_graph_hooks;
};

template <class C>
inline constexpr bool supports_recompute = false;
template <checkpoint_policy C>
inline constexpr bool supports_recompute<C> = static_cast<bool>(C::supports_recompute);

/// The manager's side of checkpoint_frame (frames are passive; the manager drives them).
struct frame_access {
  using phase = checkpoint_frame::phase;
  static phase get(const checkpoint_frame& f) noexcept { return f.phase_; }
  static void set(checkpoint_frame& f, phase p) noexcept { f.phase_ = p; }
  static const void* owner(const checkpoint_frame& f) noexcept { return f.owner_; }
  static void begin(checkpoint_frame& f, const void* owner, std::size_t* outstanding) noexcept {
    f.owner_ = owner;
    f.outstanding_ = outstanding;
    ++*outstanding;
    f.phase_ = phase::recording;
  }
  static void release(checkpoint_frame& f) noexcept { f.release(); }
  static snapshot_map& snapshot(checkpoint_frame& f) noexcept { return f.snapshot_; }
  static std::unique_ptr<snapshot_storage>& device_storage(checkpoint_frame& f) noexcept { return f.device_; }
};

template <class Buffer>
inline constexpr char snapshot_kind_tag = 0;

/// A frame's device snapshot: one backend buffer of scales (see snapshot_storage).
template <class Buffer>
class snapshot_buffer final : public snapshot_storage {
 public:
  snapshot_buffer(Buffer buffer, std::size_t capacity, const void* owner)
      : buffer_(std::move(buffer)), capacity_(capacity), owner_(owner) {}
  float* data() noexcept override { return buffer_.data(); }
  std::size_t capacity() const noexcept override { return capacity_; }
  const void* owner() const noexcept override { return owner_; }
  const void* kind() const noexcept override { return &snapshot_kind_tag<Buffer>; }

 private:
  Buffer buffer_;
  std::size_t capacity_;
  const void* owner_;
};

/// Backends that update all buckets of a direction in one pass (cuda_backend: one kernel launch).
// (The view type is spelled with declval: nvcc 13 cannot refer to one requires-parameter in another.)
template <class State, class Algo, class Args>
concept batched_bucket_update =
    requires(State& s, std::span<const decltype(std::declval<State&>().view())> views, std::span<const Args> args,
             direction d) { s.backend().update_delayed(views, args, Algo{}, d); };

/// Runs the recipe's update on every non-empty bucket of `dir`: one backend call for all of them
/// where the backend has a batched update, else one call per bucket.
template <class Algo, class Args, class States, class Buckets>
void update_direction(direction dir, const Args& args, States& states, const Buckets& buckets) {
  using state_type = typename States::value_type;
  if constexpr (batched_bucket_update<state_type, Algo, Args>) {
    using view_type = decltype(std::declval<state_type&>().view());
    // Fixed room on the stack: no allocation on the update path (it may run inside a graph capture).
    constexpr std::size_t chunk = 32;
    std::array<view_type, chunk> views{};
    std::array<Args, chunk> chunk_args{};
    std::size_t k = 0, launcher = buckets.size();
    const auto launch = [&] {
      states[launcher].backend().update_delayed(std::span<const view_type>(views.data(), k),
                                                std::span<const Args>(chunk_args.data(), k), Algo{}, dir);
      k = 0;
    };
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (buckets[b].dir != dir || buckets[b].slots == 0) continue;
      if (k == 0) launcher = b;
      views[k] = states[b].view();
      chunk_args[k] = args;
      if (++k == chunk) launch();
    }
    if (k != 0) launch();
  } else {
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      if (buckets[b].dir != dir || buckets[b].slots == 0) continue;
      states[b].update(Algo{}, args);
    }
  }
}

constexpr std::uint64_t frame_key(slot_id s) noexcept {
  return (static_cast<std::uint64_t>(s.bucket) << 32) | s.index;
}

/// Generic reduce-and-update of one direction for a stateful recipe: every bucket's staging amaxes
/// are reduced first (all buckets, in bucket order, so a failing collective leaves nothing half
/// updated: reducing twice is idempotent), then each bucket runs the recipe's fused update.
template <class Recipe, class Params, class States, class Buckets, class Comm>
std::uint64_t reduce_and_update(const Params& params, direction dir, States& states, const Buckets& buckets,
                                Comm& comm) {
  std::uint64_t collectives = 0;
  if (params.reduce_amax) {
    // Ascending group order, not creation order: ranks that first met modules of different groups in
    // a different order must still enter the same collectives in the same order (or they deadlock).
    // A direction has at most one bucket per group.
    bool any = false;
    std::uint32_t last = 0;
    for (;;) {
      std::size_t next = buckets.size();
      for (std::size_t b = 0; b < buckets.size(); ++b) {
        if (buckets[b].dir != dir || buckets[b].slots == 0 || (any && buckets[b].group <= last)) continue;
        if (next == buckets.size() || buckets[b].group < buckets[next].group) next = b;
      }
      if (next == buckets.size()) break;
      auto staging = states[next].staging();
      comm.all_reduce_max(staging.data(), staging.size(), buckets[next].group);
      ++collectives;
      any = true;
      last = buckets[next].group;
    }
  }
  update_direction<typename Recipe::algo_type>(dir, Recipe::update_args(params, dir), states, buckets);
  return collectives;
}

}  // namespace detail

/// Owns the quantization state of one model and moves it at the right boundaries.
///
/// Recipe     how tensors are scaled (delayed_scaling<>, current_scaling, mxfp8_scaling, block_scaling)
/// Boundary   when the backward update is flushed (engine_callback<Hooks>, autocast_entry,
///            explicit_scope, first_module_owner)
/// Checkpoint what activation recompute sees (stacked_recompute, no_recompute)
/// Comm       how staging amaxes are reduced across ranks (single_process, mpi_comm, nccl_comm)
/// Backend    where state lives and casts run (host_backend, cuda_backend)
///
/// Threading: request_backward_update() and plan_cast() of backward slots may be called from several
/// threads at once; everything else belongs to the thread that drives the training loop.
///
/// Device backends (cuda_backend): scales, staging amaxes and checkpoint snapshots live in device
/// memory and every cast plan holds device pointers; the updates, flushes and snapshots are
/// stream-ordered work on the backend's stream and never wait for the device, so a training step
/// (casts, forward update, backward flush, frames once they have their storage) can be captured in a
/// CUDA graph. Counters and flags stay on the host: a replayed graph does not count its updates.
/// scale() and staging_amax() read device memory (a synchronisation: tests and logging only).
template <class Recipe, class Boundary, class Checkpoint = stacked_recompute, class Comm = single_process,
          class Backend = host_backend>
class quantization_manager {
  static_assert(scaling_recipe<Recipe>,
                "tequant: Recipe (1st argument of quantization_manager) must model tequant::scaling_recipe "
                "(delayed_scaling<>, current_scaling, mxfp8_scaling, block_scaling) - see recipe/concepts.hpp");
  static_assert(boundary_strategy<Boundary>,
                "tequant: Boundary (2nd argument of quantization_manager) must model tequant::boundary_strategy "
                "(engine_callback<Hooks>, autocast_entry, explicit_scope, first_module_owner) - see "
                "boundary/concepts.hpp");
  static_assert(checkpoint_policy<Checkpoint>,
                "tequant: Checkpoint (3rd argument of quantization_manager) must model tequant::checkpoint_policy "
                "(stacked_recompute, no_recompute) - see checkpoint/concepts.hpp");
  static_assert(amax_comm<Comm>,
                "tequant: Comm (4th argument of quantization_manager) must model tequant::amax_comm "
                "(single_process, mpi_comm, nccl_comm) - see comm/concepts.hpp");
  static_assert(execution_backend<Backend>,
                "tequant: Backend (5th argument of quantization_manager) must model tequant::execution_backend "
                "(host_backend, cuda_backend) - see backend/concepts.hpp");

  using traits = detail::boundary_traits<Boundary>;
  friend struct detail::manager_access;

 public:
  using recipe_type = Recipe;
  using boundary_type = Boundary;
  using checkpoint_type = Checkpoint;
  using comm_type = Comm;
  using backend_type = Backend;
  using params_type = typename detail::params_of<Recipe>::type;
  /// Per-bucket recipe state (std::vector of Recipe::state_for<Backend>) or an empty type.
  using recipe_state_type = typename detail::recipe_state_of<Recipe, Backend>::type;
  static constexpr bool is_stateful = detail::recipe_is_stateful<Recipe>;

  /// One bucket: all slots of one (direction, reduction group).
  struct bucket_info {
    direction dir = direction::forward;
    std::uint32_t group = 0;
    std::uint32_t slots = 0;
    std::vector<std::uint64_t> owners;  // per slot: module << 32 | role_index (error messages)
  };

  /// Everything the manager stores. The policies add nothing to it when they are empty, which the
  /// tests assert (sizeof(manager) == sizeof(state_type)).
  struct state_type {
    params_type params{};
    TEQUANT_NO_UNIQUE_ADDRESS recipe_state_type recipe{};
    struct module_info {
      std::string name;
      std::uint32_t num_gemms;
      slot_id forward_base, backward_base;
    };
    std::vector<module_info> modules;
    std::vector<bucket_info> buckets;
    // What a cast needs from bucket b in one contiguous record (refreshed at every registration,
    // when the recipe state may have moved).
    struct hot_bucket {
      float* scale;
      float* staging;
      std::uint32_t slots;
      direction dir;
      fp8_dtype dtype;
    };
    std::vector<hot_bucket> hot;
    std::uint32_t hot_buckets = 0;  // hot.size(), so that the cast path's bounds check is one compare
    struct frame_entry {
      checkpoint_frame* frame;
      enum class mode : std::uint8_t { inactive, recording, replaying } kind;
    };
    std::vector<frame_entry> frames;
    std::vector<std::function<void()>> deferred;
    mutable std::mutex deferred_mutex;
    std::atomic<bool> pending{false};
    std::atomic<bool> callback_queued{false};
    std::atomic<std::uint32_t> scope_depth{0};
    std::atomic<std::uint64_t> forward_updates{0}, backward_updates{0}, collectives{0};
    std::size_t outstanding_snapshots = 0;
    std::uint32_t autocast_depth = 0;
    std::uint32_t replay_depth = 0;
    bool grad_enabled = true;
    bool quantization_enabled = false;  // innermost autocast region is enabled
    bool owner_flag = false;            // first_module_owner only
    bool scope_in_backward = false;     // the outermost backward scope left the flush to a task callback
  };

  // ---- RAII guards ---------------------------------------------------------------------------------

  /// An autocast region (see autocast()). Its destructor may throw when the forward update fails.
  class [[nodiscard]] autocast_region {
   public:
    autocast_region(autocast_region&& o) noexcept
        : m_(std::exchange(o.m_, nullptr)), enabled_(o.enabled_), prev_enabled_(o.prev_enabled_),
          prev_owner_(o.prev_owner_), uncaught_(o.uncaught_) {}
    autocast_region& operator=(autocast_region&&) = delete;
    ~autocast_region() noexcept(false) {
      if (m_ != nullptr) m_->exit_autocast(*this);
    }

   private:
    friend class quantization_manager;
    explicit autocast_region(quantization_manager* m, bool enabled) noexcept
        : m_(m), enabled_(enabled), uncaught_(std::uncaught_exceptions()) {}
    quantization_manager* m_;
    bool enabled_, prev_enabled_ = false, prev_owner_ = false;
    int uncaught_;
  };

  /// Sets the host engine's grad mode for its lifetime.
  class [[nodiscard]] grad_mode_guard {
   public:
    grad_mode_guard(grad_mode_guard&& o) noexcept : m_(std::exchange(o.m_, nullptr)), prev_(o.prev_) {}
    grad_mode_guard& operator=(grad_mode_guard&&) = delete;
    ~grad_mode_guard() {
      if (m_ != nullptr) m_->state_.grad_enabled = prev_;
    }

   private:
    friend class quantization_manager;
    grad_mode_guard(quantization_manager* m, bool prev) noexcept : m_(m), prev_(prev) {}
    quantization_manager* m_;
    bool prev_;
  };

  /// A backward scope (see backward_scope()). Its destructor may throw when the flush fails.
  class [[nodiscard]] backward_scope_guard {
   public:
    backward_scope_guard(backward_scope_guard&& o) noexcept : m_(std::exchange(o.m_, nullptr)), uncaught_(o.uncaught_) {}
    backward_scope_guard& operator=(backward_scope_guard&&) = delete;
    ~backward_scope_guard() noexcept(false) {
      if (m_ != nullptr) m_->exit_scope(uncaught_);
    }

   private:
    friend class quantization_manager;
    explicit backward_scope_guard(quantization_manager* m) noexcept : m_(m), uncaught_(std::uncaught_exceptions()) {}
    quantization_manager* m_;
    int uncaught_;
  };

  /// An open checkpoint frame (original forward or replay).
  class [[nodiscard]] frame_guard {
   public:
    frame_guard(frame_guard&& o) noexcept
        : m_(std::exchange(o.m_, nullptr)), frame_(o.frame_), uncaught_(o.uncaught_) {}
    frame_guard& operator=(frame_guard&&) = delete;
    ~frame_guard() {
      if (m_ != nullptr) m_->exit_frame(*frame_, uncaught_);
    }

   private:
    friend class quantization_manager;
    frame_guard(quantization_manager* m, checkpoint_frame* f) noexcept
        : m_(m), frame_(f), uncaught_(std::uncaught_exceptions()) {}
    quantization_manager* m_;
    checkpoint_frame* frame_;
    int uncaught_;
  };

  // ---- construction --------------------------------------------------------------------------------

  explicit quantization_manager(params_type params = {}, Boundary boundary = {}, Comm comm = {}, Backend backend = {})
      : boundary_(std::move(boundary)), comm_(std::move(comm)), backend_(std::move(backend)) {
    if constexpr (scaling_recipe<Recipe>) Recipe::validate(params);
    state_.params = params;
  }
  // Callbacks queued on the engine and frames point at the manager: it stays where it was built.
  quantization_manager(const quantization_manager&) = delete;
  quantization_manager& operator=(const quantization_manager&) = delete;

  // ---- registration --------------------------------------------------------------------------------

  /// Registers a module with `num_gemms` GEMMs: 3 forward slots (input, weight, output) and 2 backward
  /// slots (grad_output, grad_input) per GEMM, in the buckets of (direction, group).
  module_handle register_module(std::string name, std::uint32_t num_gemms = 1, reduction_groups groups = {}) {
    detail::require(num_gemms >= 1, "register_module('", name, "'): num_gemms must be >= 1");
    detail::require(state_.modules.size() < 0xFFFFFFFFu, "register_module('", name, "'): too many modules");
    if constexpr (requires(const Comm& c) { { c.groups() } -> std::convertible_to<std::uint32_t>; })
      detail::require(groups.forward < comm_.groups() && groups.backward < comm_.groups(), "register_module('", name,
                      "'): reduction groups (forward ", groups.forward, ", backward ", groups.backward,
                      ") must be below the communicator's ", comm_.groups(), " groups");
    const auto module = static_cast<std::uint32_t>(state_.modules.size());
    state_.hot.reserve(state_.buckets.size() + 2);  // refresh_hot below cannot throw then
    try {
      const slot_id fwd = add_slots(direction::forward, groups.forward, 3 * num_gemms, module);
      const slot_id bwd = add_slots(direction::backward, groups.backward, 2 * num_gemms, module);
      state_.modules.push_back({std::move(name), num_gemms, fwd, bwd});
    } catch (...) {
      refresh_hot();  // slots added before the failure stay (unowned) and their storage may have moved
      throw;
    }
    refresh_hot();
    return {module};
  }

  slot_id slot(module_handle m, forward_role role, std::uint32_t gemm = 0) const {
    const auto& info = module_at(m, "slot");
    detail::require(gemm < info.num_gemms, "slot: module '", info.name, "' has ", info.num_gemms, " GEMMs, asked for ", gemm);
    slot_id s = info.forward_base;
    s.index += 3 * gemm + static_cast<std::uint32_t>(role);
    return s;
  }

  slot_id slot(module_handle m, backward_role role, std::uint32_t gemm = 0) const {
    const auto& info = module_at(m, "slot");
    detail::require(gemm < info.num_gemms, "slot: module '", info.name, "' has ", info.num_gemms, " GEMMs, asked for ", gemm);
    slot_id s = info.backward_base;
    s.index += 2 * gemm + static_cast<std::uint32_t>(role);
    return s;
  }

  std::size_t module_count() const noexcept { return state_.modules.size(); }
  const std::string& module_name(module_handle m) const { return module_at(m, "module_name").name; }
  std::size_t bucket_count() const noexcept { return state_.buckets.size(); }
  const bucket_info& bucket(std::uint32_t b) const {
    detail::require(b < state_.buckets.size(), "bucket: index ", b, " out of range (", state_.buckets.size(), " buckets)");
    return state_.buckets[b];
  }

  // ---- regions and modes ---------------------------------------------------------------------------

  /// RAII autocast region; regions nest. At a top-level entry a pending backward update is flushed
  /// (autocast_entry, and engine_callback's fallback) when outside any backward, scope and replay.
  /// The forward update runs when an enabled region exits to depth 0 with gradients enabled, outside
  /// any replay and not during stack unwinding.
  autocast_region autocast(bool enabled = true) {
    auto& s = state_;
    if (s.autocast_depth == 0) top_level_entry();
    autocast_region r(this, enabled);
    r.prev_enabled_ = s.quantization_enabled;
    r.prev_owner_ = s.owner_flag;
    if constexpr (traits::first_module_owns) {
      if (s.autocast_depth == 0) s.owner_flag = true;  // TE: reset at every depth-0 entry, replays included
    }
    s.quantization_enabled = enabled;
    ++s.autocast_depth;
    return r;
  }

  /// Sets the host engine's grad mode (what torch.is_grad_enabled() is to TE) until the guard dies.
  grad_mode_guard grad_mode(bool enabled) noexcept {
    grad_mode_guard g(this, state_.grad_enabled);
    state_.grad_enabled = enabled;
    return g;
  }
  bool grad_enabled() const noexcept { return state_.grad_enabled; }
  /// True inside an enabled autocast region (the innermost region decides).
  bool quantization_enabled() const noexcept { return state_.quantization_enabled; }
  /// True while any checkpoint replay is open.
  bool in_replay() const noexcept { return state_.replay_depth != 0; }

  // ---- module forward / backward -------------------------------------------------------------------

  /// Called once per module forward. Under first_module_owner the first module with a backward in the
  /// outermost autocast consumes the ownership flag here (in a replay it restores it, as TE main does).
  backward_ticket module_forward(module_handle m, bool needs_backward = true) {
    (void)module_at(m, "module_forward");
    if constexpr (traits::first_module_owns) {
      auto& s = state_;
      if (s.quantization_enabled && s.grad_enabled && needs_backward) {
        const bool owner = s.owner_flag;
        if (s.replay_depth == 0) s.owner_flag = false;
        return {owner};
      }
    }
    return {};
  }

  /// Where the next cast of `slot` reads its scale and records its amax. Forward slots inside a
  /// replay (or inside a frame that runs within a replay) use the replayed frame's snapshot and record
  /// nothing; forward slots inside a recording frame snapshot the scale they use.
  cast_plan plan_cast(slot_id slot) {
    const auto& hb = checked_slot(slot, "plan_cast");
    if constexpr (!is_stateful) {
      (void)hb;
      return Recipe::plan(state_.params, slot);
    } else {
      // Without recompute no frame can exist: the cast path does not even look.
      if constexpr (detail::supports_recompute<Checkpoint>) {
        if (slot.dir == direction::forward && !state_.frames.empty())
          return plan_forward_in_frames(slot, state_.recipe[slot.bucket], hb.dtype);
      }
      return {hb.scale + slot.index, hb.staging + slot.index, hb.dtype};
    }
  }

  /// A module backward says "a backward update is needed". Idempotent and thread-safe; on its common
  /// path one relaxed load (no lock, no allocation). A no-op for stateless recipes.
  void request_backward_update() {
    if constexpr (is_stateful) {
      auto& s = state_;
      if (s.scope_depth.load(std::memory_order_relaxed) != 0) {
        mark_pending();
        return;
      }
      if constexpr (traits::requests_need_scope) {
        detail::fail("request_backward_update() outside backward_scope() under explicit_scope: wrap the whole "
                     "logical backward (all backward calls and deferred weight-gradient work) in "
                     "manager.backward_scope()");
      } else if constexpr (traits::first_module_owns) {
        return;  // TE's old modules: only the owner's backward does anything
      } else {
        mark_pending();
        if constexpr (traits::uses_graph_hooks) {
          if (!s.callback_queued.load(std::memory_order_acquire)) queue_on_current_task();
        }
      }
    }
  }

  /// As above, with the ticket module_forward returned: under first_module_owner the owner flushes now.
  void request_backward_update(backward_ticket ticket) {
    if constexpr (traits::first_module_owns && is_stateful) {
      if (state_.scope_depth.load(std::memory_order_relaxed) != 0) {
        mark_pending();
      } else if (ticket.owner) {
        mark_pending();
        run_pending_backward_update();
      }
    } else {
      request_backward_update();
    }
  }

  /// RAII: the enclosed work is one logical backward. Entering the outermost scope marks the update
  /// pending unconditionally (every rank joins the collective); inside, requests only mark it pending;
  /// the outermost exit flushes once (or, when opened inside a backward task, that task's end does).
  /// Works under every boundary. On an exceptional exit nothing is flushed and the update stays pending.
  backward_scope_guard backward_scope() {
    auto& s = state_;
    if (s.scope_depth.load(std::memory_order_relaxed) == 0) {
      if constexpr (is_stateful) {
        const bool in_bwd = in_backward();
        if constexpr (traits::uses_graph_hooks) {
          if (!in_bwd) s.callback_queued.store(false, std::memory_order_release);  // any task it named has ended
        }
        mark_pending();
        s.scope_in_backward = in_bwd && queue_on_current_task();
      }
    }
    s.scope_depth.fetch_add(1, std::memory_order_relaxed);
    return backward_scope_guard(this);
  }

  /// Registers backward_dw-style work (a delayed weight gradient) to run later, inside the scope.
  void defer_weight_grad(std::function<void()> work) {
    detail::require(static_cast<bool>(work), "defer_weight_grad: empty function");
    std::lock_guard<std::mutex> lock(state_.deferred_mutex);
    state_.deferred.push_back(std::move(work));
  }

  /// Runs the deferred weight-gradient work in registration order. It belongs to the logical backward,
  /// so it must run inside backward_scope() (before the update the scope's exit flushes). If one item
  /// throws, it and the items after it stay registered.
  void run_deferred_weight_grads() {
    detail::require(state_.scope_depth.load(std::memory_order_relaxed) != 0,
                    "run_deferred_weight_grads() outside backward_scope(): deferred weight-gradient work belongs "
                    "to the logical backward; run it inside manager.backward_scope() so that the backward update "
                    "is flushed after it");
    std::vector<std::function<void()>> work;
    {
      std::lock_guard<std::mutex> lock(state_.deferred_mutex);
      work.swap(state_.deferred);
    }
    std::size_t i = 0;
    try {
      for (; i < work.size(); ++i) work[i]();
    } catch (...) {
      std::lock_guard<std::mutex> lock(state_.deferred_mutex);
      state_.deferred.insert(state_.deferred.begin(), std::make_move_iterator(work.begin() + static_cast<std::ptrdiff_t>(i)),
                             std::make_move_iterator(work.end()));
      throw;
    }
  }

  std::size_t deferred_weight_grads() const {
    std::lock_guard<std::mutex> lock(state_.deferred_mutex);
    return state_.deferred.size();
  }

  /// Runs the pending backward update now (tests, custom loops). No-op when nothing is pending. If the
  /// reduction or update throws, the update stays pending and the exception propagates.
  void flush_backward_update() {
    if constexpr (is_stateful) run_pending_backward_update();
  }

  // ---- activation recompute ------------------------------------------------------------------------

  /// Opens `frame` for its original forward. Open it where the checkpoint is called, before the engine
  /// switches gradients off for a reentrant forward: the frame takes a snapshot only when gradients
  /// are enabled here and `inputs_need_grad`; otherwise it is inactive and inherits the enclosing
  /// context (an enclosing replay stays a replay).
  frame_guard checkpoint_forward(checkpoint_frame& frame, bool inputs_need_grad = true) {
    static_assert(detail::supports_recompute<Checkpoint>,
                  "tequant: checkpoint_forward() needs a Checkpoint policy that supports recompute "
                  "(stacked_recompute); this manager's Checkpoint (3rd argument of quantization_manager) is "
                  "no_recompute");
    using phase = detail::frame_access::phase;
    auto& s = state_;
    detail::require(detail::frame_access::get(frame) == phase::idle, "checkpoint_forward: frame '", frame.name(),
                    "' already holds a snapshot that no replay consumed (",
                    describe_phase(detail::frame_access::get(frame)), "); use one frame per checkpoint call");
    const bool active = s.grad_enabled && inputs_need_grad;
    using entry = typename state_type::frame_entry;
    s.frames.push_back({&frame, active ? entry::mode::recording : entry::mode::inactive});
    if (active) detail::frame_access::begin(frame, this, &s.outstanding_snapshots);
    return frame_guard(this, &frame);
  }

  /// Reopens `frame` for its replay: forward casts use exactly the scales of its original forward and
  /// record no amax; no forward update runs and nothing is flushed. The snapshot is released when the
  /// replay ends (normally or not). Inside a backward task under engine_callback, the update callback
  /// is queued on this (outer) task now, so a nested backward that follows cannot queue its own.
  frame_guard checkpoint_replay(checkpoint_frame& frame) {
    static_assert(detail::supports_recompute<Checkpoint>,
                  "tequant: checkpoint_replay() needs a Checkpoint policy that supports recompute "
                  "(stacked_recompute); this manager's Checkpoint (3rd argument of quantization_manager) is "
                  "no_recompute");
    using phase = detail::frame_access::phase;
    auto& s = state_;
    const phase p = detail::frame_access::get(frame);
    detail::require(p == phase::ready && detail::frame_access::owner(frame) == this, "checkpoint_replay: frame '",
                    frame.name(), "' has no snapshot to replay with (",
                    p == phase::ready ? "it was recorded by another manager" : describe_phase(p), ")");
    if constexpr (traits::uses_graph_hooks && is_stateful) {
      if (s.scope_depth.load(std::memory_order_relaxed) == 0 && in_backward()) queue_on_current_task();
    }
    using entry = typename state_type::frame_entry;
    s.frames.push_back({&frame, entry::mode::replaying});
    detail::frame_access::set(frame, phase::replaying);
    ++s.replay_depth;
    return frame_guard(this, &frame);
  }

  // ---- state ---------------------------------------------------------------------------------------

  /// The live scale of a slot (a host read: on a device backend this synchronises).
  float scale(slot_id slot) const {
    (void)checked_slot(slot, "scale");
    if constexpr (is_stateful) {
      return state_.recipe[slot.bucket].scale(slot.index);
    } else {
      detail::fail("scale: recipe ", Recipe::name, " is stateless; its scales are computed per cast");
    }
  }

  /// The staging amax of a slot (what the next update will commit).
  float staging_amax(slot_id slot) const {
    (void)checked_slot(slot, "staging_amax");
    if constexpr (is_stateful) {
      return state_.recipe[slot.bucket].staging_amax(slot.index);
    } else {
      detail::fail("staging_amax: recipe ", Recipe::name, " is stateless");
    }
  }

  manager_stats stats() const noexcept {
    const auto& s = state_;
    manager_stats r;
    r.forward_updates = s.forward_updates.load(std::memory_order_relaxed);
    r.backward_updates = s.backward_updates.load(std::memory_order_relaxed);
    r.collectives = s.collectives.load(std::memory_order_relaxed);
    r.pending = s.pending.load(std::memory_order_acquire);
    r.autocast_depth = s.autocast_depth;
    r.scope_depth = s.scope_depth.load(std::memory_order_relaxed);
    r.checkpoint_depth = static_cast<std::uint32_t>(s.frames.size());
    r.outstanding_snapshots = s.outstanding_snapshots;
    return r;
  }

  const params_type& params() const noexcept { return state_.params; }
  /// Per-bucket recipe state, indexed like bucket(b) (for export/import and tests).
  recipe_state_type& recipe_state() noexcept { return state_.recipe; }
  const recipe_state_type& recipe_state() const noexcept { return state_.recipe; }
  Boundary& boundary() noexcept { return boundary_; }
  Comm& comm() noexcept { return comm_; }
  Backend& backend() noexcept { return backend_; }

 private:
  using frame_mode = typename state_type::frame_entry::mode;

  const typename state_type::module_info& module_at(module_handle m, const char* where) const {
    detail::require(m.index < state_.modules.size(), where, ": module handle ", m.index, " is not registered (",
                    state_.modules.size(), " modules)");
    return state_.modules[m.index];
  }

  // The bucket's cast record, after checking that `s` belongs to this manager.
  const typename state_type::hot_bucket& checked_slot(slot_id s, const char* where) const {
    if (s.bucket >= state_.hot_buckets) [[unlikely]]
      bad_slot(s, where);
    const auto& h = state_.hot.data()[s.bucket];
    if (s.index >= h.slots || h.dir != s.dir) [[unlikely]]
      bad_slot(s, where);
    return h;
  }

  // Kept out of line so that the checks on the cast path stay a few compares.
  [[noreturn, gnu::noinline, gnu::cold]] static void bad_slot(slot_id s, const char* where) {
    detail::fail(where, ": slot (", to_string(s.dir), ", bucket ", s.bucket, ", index ", s.index,
                 ") does not belong to this manager");
  }

  std::string describe_slot(slot_id s) const {
    const std::uint64_t owner = state_.buckets[s.bucket].owners[s.index];
    const auto module = static_cast<std::uint32_t>(owner >> 32);
    const auto k = static_cast<std::uint32_t>(owner);
    std::string r = "'" + state_.modules[module].name + "'.";
    if (s.dir == direction::forward)
      r += std::string(to_string(static_cast<forward_role>(k % 3))) + "[gemm " + std::to_string(k / 3) + "]";
    else
      r += std::string(to_string(static_cast<backward_role>(k % 2))) + "[gemm " + std::to_string(k / 2) + "]";
    return r;
  }

  [[noreturn, gnu::noinline, gnu::cold]] void missing_snapshot(const checkpoint_frame& f, slot_id slot) const {
    detail::fail("checkpoint_replay: frame '", f.name(), "' has no snapshot of forward slot ", describe_slot(slot),
                 ": its original forward did not cast this slot, so the replay cannot reproduce it");
  }

  static const char* describe_phase(detail::frame_access::phase p) noexcept {
    using phase = detail::frame_access::phase;
    switch (p) {
      case phase::idle:
        return "its original forward did not run under this manager with gradients enabled and inputs that "
               "need gradients, did not complete, or was already replayed";
      case phase::recording: return "its original forward is still running";
      case phase::ready: return "its original forward completed and was not replayed yet";
      case phase::replaying: return "it is being replayed";
    }
    return "unknown";
  }

  void refresh_hot() noexcept {
    auto& s = state_;
    s.hot.resize(s.buckets.size());
    for (std::size_t b = 0; b < s.buckets.size(); ++b) {
      auto& h = s.hot[b];
      h.slots = s.buckets[b].slots;
      h.dir = s.buckets[b].dir;
      if constexpr (scaling_recipe<Recipe>) h.dtype = Recipe::dtype(s.params, h.dir);
      if constexpr (is_stateful) {
        h.scale = s.recipe[b].scale_data();
        h.staging = s.recipe[b].staging().data();
      } else {
        h.scale = h.staging = nullptr;
      }
    }
    s.hot_buckets = static_cast<std::uint32_t>(s.hot.size());
  }

  slot_id add_slots(direction dir, std::uint32_t group, std::uint32_t count, std::uint32_t module) {
    auto& s = state_;
    std::uint32_t b = 0;
    while (b < s.buckets.size() && !(s.buckets[b].dir == dir && s.buckets[b].group == group)) ++b;
    if (b == s.buckets.size()) {
      if constexpr (is_stateful) s.recipe.emplace_back(s.params.history_length, backend_);
      try {
        s.buckets.push_back({dir, group, 0, {}});
      } catch (...) {
        if constexpr (is_stateful) s.recipe.pop_back();
        throw;
      }
    }
    auto& info = s.buckets[b];
    const slot_id first{dir, b, info.slots};
    info.owners.reserve(info.owners.size() + count);
    for (std::uint32_t k = 0; k < count; ++k) {
      if constexpr (is_stateful) (void)s.recipe[b].add_slot();
      info.owners.push_back((static_cast<std::uint64_t>(module) << 32) | k);
      ++info.slots;
    }
    return first;
  }

  template <class State>
  cast_plan plan_forward_in_frames(slot_id slot, State& st, fp8_dtype dtype) {
    auto& frames = state_.frames;
    const std::uint64_t key = detail::frame_key(slot);
    // The nearest replaying frame below the top decides the scale; recording frames above it reserve
    // that scale as their own snapshot (a checkpoint forward inside a replay).
    std::size_t r = frames.size();
    while (r > 0 && frames[r - 1].kind != frame_mode::replaying) --r;
    cast_plan plan{st.scale_data() + slot.index, st.staging().data() + slot.index, dtype};
    if constexpr (!Backend::host_accessible) {
      return plan_forward_on_device(slot, key, r, plan);
    } else {
      return plan_forward_on_host(slot, key, r, plan, st);
    }
  }

  template <class State>
  cast_plan plan_forward_on_host(slot_id slot, std::uint64_t key, std::size_t r, cast_plan plan, State& st) {
    auto& frames = state_.frames;
    float used;
    if (r > 0) {
      checkpoint_frame& f = *frames[r - 1].frame;
      auto& snap = detail::frame_access::snapshot(f);
      const std::size_t pos = snap.find(key);
      if (pos == detail::snapshot_map::npos) missing_snapshot(f, slot);
      used = snap.value(pos);
      plan.scale = &snap.value(pos);  // a replaying frame takes no new entries: the address holds until it ends
      plan.amax = nullptr;
    } else {
      used = st.scale(slot.index);
    }
    for (std::size_t i = r; i < frames.size(); ++i)
      if (frames[i].kind == frame_mode::recording) detail::frame_access::snapshot(*frames[i].frame).try_emplace(key, used);
    return plan;
  }

  // Backend memory the host cannot read: snapshots are stream-ordered backend-to-backend copies into
  // the frame's buffer, replays cast with pointers into it; nothing waits for the device.
  cast_plan plan_forward_on_device(slot_id slot, std::uint64_t key, std::size_t r, cast_plan plan) {
    auto& frames = state_.frames;
    const float* used = plan.scale;
    if (r > 0) {
      checkpoint_frame& f = *frames[r - 1].frame;
      const std::size_t pos = detail::frame_access::snapshot(f).find(key);
      if (pos == detail::snapshot_map::npos) missing_snapshot(f, slot);
      used = detail::frame_access::device_storage(f)->data() + pos;
      plan.scale = used;  // the frame's buffer does not move while it replays
      plan.amax = nullptr;
    }
    for (std::size_t i = r; i < frames.size(); ++i)
      if (frames[i].kind == frame_mode::recording) snapshot_on_device(*frames[i].frame, key, used);
    return plan;
  }

  // First use of `key` in a recording frame: reserve a position in its buffer and copy the scale in.
  // Strong guarantee: a failed allocation or copy leaves the frame as it was.
  void snapshot_on_device(checkpoint_frame& f, std::uint64_t key, const float* src) {
    auto& index = detail::frame_access::snapshot(f);  // positions in the buffer; values unused
    if (index.find(key) != detail::snapshot_map::npos) return;
    auto& storage = detail::frame_access::device_storage(f);
    const std::size_t pos = index.size();
    using buffer_type = decltype(backend_.template make_buffer<float>(std::size_t{}));
    if (storage == nullptr || storage->owner() != this || storage->kind() != &detail::snapshot_kind_tag<buffer_type> ||
        storage->capacity() <= pos) {
      // Room for every forward slot known now, so that a frame needs one allocation in its first step;
      // registrations inside a frame grow it geometrically.
      std::size_t cap = 0;
      for (const auto& h : state_.hot)
        if (h.dir == direction::forward) cap += h.slots;
      const bool reuse = storage != nullptr && storage->owner() == this &&
                         storage->kind() == &detail::snapshot_kind_tag<buffer_type>;
      cap = std::max({cap, pos + 1, reuse ? 2 * storage->capacity() : std::size_t{0}});
      auto grown = std::make_unique<detail::snapshot_buffer<buffer_type>>(backend_.template make_buffer<float>(cap), cap,
                                                                         this);
      if (reuse && pos != 0) backend_.copy(grown->data(), storage->data(), pos);
      storage = std::move(grown);  // the old buffer's release (cudaFree) waits for the copy
    }
    index.try_emplace(key, 0.0f);
    try {
      backend_.copy(storage->data() + pos, src, 1);
    } catch (...) {
      index.pop_back();
      throw;
    }
  }

  void exit_frame(checkpoint_frame& frame, int uncaught) noexcept {
    using phase = detail::frame_access::phase;
    auto& frames = state_.frames;
    // Guards are RAII, so this is the top entry; search anyway so that a misused guard cannot corrupt
    // the stack of another frame.
    std::size_t i = frames.size();
    while (i > 0 && frames[i - 1].frame != &frame) --i;
    if (i == 0) return;
    const frame_mode kind = frames[i - 1].kind;
    frames.erase(frames.begin() + static_cast<std::ptrdiff_t>(i - 1));
    if (kind == frame_mode::replaying) {
      --state_.replay_depth;
      detail::frame_access::release(frame);
    } else if (kind == frame_mode::recording) {
      if (std::uncaught_exceptions() > uncaught)
        detail::frame_access::release(frame);  // a failed forward has no replay
      else
        detail::frame_access::set(frame, phase::ready);
    }
  }

  bool in_backward() {
    if constexpr (traits::uses_graph_hooks)
      return static_cast<bool>(boundary_.hooks().in_backward());
    else
      return false;
  }

  void mark_pending() noexcept {
    // Load first: many threads requesting at once then share the cache line instead of bouncing it.
    if (!state_.pending.load(std::memory_order_relaxed)) state_.pending.store(true, std::memory_order_release);
  }

  // Queues the flush callback on the current task unless one is queued already (on this task or an
  // enclosing one). Returns whether a callback is queued now.
  bool queue_on_current_task() {
    if constexpr (traits::uses_graph_hooks) {
      auto& q = state_.callback_queued;
      if (q.load(std::memory_order_acquire)) return true;
      if (!in_backward()) return false;  // fall back to the next top-level autocast entry
      if (q.exchange(true, std::memory_order_acq_rel)) return true;
      bool queued = false;
      try {
        queued = static_cast<bool>(boundary_.hooks().queue_callback(&quantization_manager::task_end_thunk, this));
      } catch (...) {
        q.store(false, std::memory_order_release);
        throw;
      }
      if (!queued) q.store(false, std::memory_order_release);
      return queued;
    } else {
      return false;
    }
  }

  static void task_end_thunk(void* self) { static_cast<quantization_manager*>(self)->task_ended(); }

  void task_ended() {
    auto& s = state_;
    s.callback_queued.store(false, std::memory_order_release);
    s.scope_in_backward = false;
    if (s.scope_depth.load(std::memory_order_relaxed) == 0) run_pending_backward_update();
  }

  void top_level_entry() {
    if constexpr (is_stateful && traits::flushes_at_autocast_entry) {
      auto& s = state_;
      if (s.scope_depth.load(std::memory_order_relaxed) != 0 || s.replay_depth != 0 || in_backward()) return;
      if constexpr (traits::uses_graph_hooks) s.callback_queued.store(false, std::memory_order_release);
      run_pending_backward_update();
    }
  }

  void exit_autocast(autocast_region& r) {
    auto& s = state_;
    --s.autocast_depth;
    s.quantization_enabled = r.prev_enabled_;
    if constexpr (traits::first_module_owns) s.owner_flag = r.prev_owner_;  // TE main: revives consumed ownership
    if constexpr (is_stateful) {
      if (r.enabled_ && s.autocast_depth == 0 && s.grad_enabled && s.replay_depth == 0 &&
          std::uncaught_exceptions() <= r.uncaught_) {
        run_update(direction::forward);
        s.forward_updates.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }

  void exit_scope(int uncaught) {
    auto& s = state_;
    if (s.scope_depth.fetch_sub(1, std::memory_order_relaxed) != 1) return;
    if constexpr (is_stateful) {
      const bool left_to_callback = std::exchange(s.scope_in_backward, false) &&
                                    s.callback_queued.load(std::memory_order_acquire);
      if (!left_to_callback && std::uncaught_exceptions() <= uncaught) run_pending_backward_update();
    }
  }

  void run_pending_backward_update() {
    auto& s = state_;
    if (!s.pending.exchange(false, std::memory_order_acq_rel)) return;
    try {
      run_update(direction::backward);
    } catch (...) {
      s.pending.store(true, std::memory_order_release);  // the next boundary retries
      throw;
    }
    s.backward_updates.fetch_add(1, std::memory_order_relaxed);
  }

  void run_update(direction dir) {
    if constexpr (is_stateful) {
      if (state_.params.reduce_amax) verify_layout(dir);
      const std::uint64_t n = detail::reduce_and_update<Recipe>(state_.params, dir, state_.recipe, state_.buckets, comm_);
      state_.collectives.fetch_add(n, std::memory_order_relaxed);
    }
  }

  // Distributed comms (mpi_comm, nccl_comm) can check, with one small collective per group, that every
  // rank built the same buckets of `dir` before the all-reduces rely on it (comm/layout.hpp). It runs
  // at every update while enabled: a rank-local "layout changed" flag could itself differ between ranks
  // and desynchronise the collectives. Every group of the comm is checked, in order, on every rank.
  void verify_layout(direction dir) {
    if constexpr (requires(Comm& c) {
                    { c.layout_check_enabled() } -> std::convertible_to<bool>;
                    { c.groups() } -> std::convertible_to<std::uint32_t>;
                  }) {
      if (!comm_.layout_check_enabled()) return;
      const std::uint32_t groups = comm_.groups();
      const std::uint64_t extra[] = {groups};
      for (std::uint32_t g = 0; g < groups; ++g) {
        std::string name;
        bucket_signature sig{};
        std::size_t n = 0;
        for (const auto& b : state_.buckets) {
          if (b.dir != dir || b.group != g || b.slots == 0) continue;
          name = std::string(to_string(dir)) + " bucket of group " + std::to_string(g);
          std::uint64_t h = detail::fnv_offset;
          for (const std::uint64_t owner : b.owners)
            h = detail::fnv1a(detail::fnv1a(h, state_.modules[owner >> 32].name), owner & 0xFFFFFFFFu);
          sig = {name, b.slots, h};
          n = 1;
        }
        detail::verify_layout(comm_, g, std::span<const bucket_signature>(&sig, n), extra);
      }
    }
  }

  state_type state_;
  TEQUANT_NO_UNIQUE_ADDRESS Boundary boundary_;
  TEQUANT_NO_UNIQUE_ADDRESS Comm comm_;
  TEQUANT_NO_UNIQUE_ADDRESS Backend backend_;
};

}  // namespace tequant
