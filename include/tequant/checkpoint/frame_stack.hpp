// SPDX-License-Identifier: Apache-2.0
// The checkpoint frames open in one manager (ARCHITECTURE §4): which plan a forward cast gets inside
// original forwards and replays, snapshots of what those casts used, LIFO restore on every exit.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tequant/cast_plan.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/checkpoint/snapshot_map.hpp"
#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/manager_types.hpp"

namespace tequant {

namespace detail {

/// The frame stack's side of checkpoint_frame (frames are passive; the stack drives them).
struct frame_access {
  using phase = checkpoint_frame::phase;
  static const char* describe(phase p) noexcept {
    switch (p) {
      case phase::idle:
        return "its original forward did not run under this manager with gradients enabled and inputs that need "
               "gradients, did not complete, or was already replayed";
      case phase::recording: return "its original forward is still running";
      case phase::ready: return "its original forward completed and was not replayed yet";
      case phase::replaying: return "it is being replayed";
    }
    return "unknown";
  }
  static phase get(const checkpoint_frame& f) noexcept { return f.phase_; }
  static void set(checkpoint_frame& f, phase p) noexcept { f.phase_ = p; }
  static const void* owner(const checkpoint_frame& f) noexcept { return f.owner_; }
  static bool enabled(const checkpoint_frame& f) noexcept { return f.enabled_; }
  static void begin(checkpoint_frame& f, const void* owner, std::size_t* outstanding, bool enabled) noexcept {
    f.owner_ = owner;
    f.outstanding_ = outstanding;
    f.enabled_ = enabled;
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

// A slot's key in a frame's snapshot (any one-to-one map of (bucket, index) serves). Index high,
// bucket low: the pair as it lies in a slot_id, so the cast path forms it from the register it loaded
// the pair into (one move; the other order took a shift and an or per forward cast).
constexpr std::uint64_t frame_key(slot_id s) noexcept {
  return (static_cast<std::uint64_t>(s.index) << 32) | s.bucket;
}

}  // namespace detail

/// stacked_recompute's frames for one manager with backend `Backend`. A frame's original forward
/// snapshots, at each forward slot's first cast, what the plan points at (the scale; the random-number
/// offset of a stochastically rounding recipe); its replay casts with exactly those and records no
/// amax. A checkpoint forward that runs inside an enclosing replay takes its values from that replay's
/// snapshot and reserves them as its own. The stack never knows which recipe made the plan.
template <class Backend>
class frame_stack {
 public:
  bool empty() const noexcept { return top_ == 0; }
  bool in_replay() const noexcept { return replay_depth_ != 0; }
  std::uint32_t depth() const noexcept { return static_cast<std::uint32_t>(top_); }
  std::size_t outstanding() const noexcept { return outstanding_; }

  /// Opens `f` for its original forward; `active`: gradients on and inputs that need them, so a replay
  /// will come (otherwise the frame inherits the enclosing context, an enclosing replay included).
  TEQUANT_ALWAYS_INLINE void open_forward(checkpoint_frame& f, bool active, bool enabled, const void* owner) {
    if (detail::frame_access::get(f) != detail::frame_access::phase::idle) [[unlikely]]
      not_idle(f);
    push({&f, active ? mode::recording : mode::inactive});
    if (active) detail::frame_access::begin(f, owner, &outstanding_, enabled);
  }

  /// Throws unless `f` holds a snapshot `owner` recorded that no replay consumed yet.
  static void require_replayable(const checkpoint_frame& f, const void* owner) {
    if (detail::frame_access::get(f) != detail::frame_access::phase::ready || detail::frame_access::owner(f) != owner)
        [[unlikely]]
      not_replayable(f, owner);
  }

  /// close() uses `unwinding` only for a frame that records (its original forward): the manager
  /// need not ask the runtime (std::uncaught_exceptions()) for replays and inactive frames.
  static constexpr bool unwinding_matters_only_when_recording = true;

  /// Reopens `f` for its replay; returns the autocast state its original forward ran under.
  TEQUANT_ALWAYS_INLINE bool open_replay(checkpoint_frame& f, const void* owner) {
    require_replayable(f, owner);
    return open_checked_replay(f);
  }

  /// open_replay for a caller that ran require_replayable(f, owner) itself, just before (the manager
  /// checks before it queues the replay's entry into the boundary): the frame is checked once.
  TEQUANT_ALWAYS_INLINE bool open_checked_replay(checkpoint_frame& f) {
    using phase = detail::frame_access::phase;
    push({&f, mode::replaying});
    detail::frame_access::set(f, phase::replaying);
    ++replay_depth_;
    return detail::frame_access::enabled(f);
  }

  /// Closes `f` (the top frame: guards are RAII; searched anyway so that a misused guard cannot corrupt
  /// another frame). A replay releases its snapshot; an original forward that unwound has no replay.
  TEQUANT_ALWAYS_INLINE void close(checkpoint_frame& f, bool unwinding) noexcept {
    mode kind;
    if (top_ != 0 && frames_[top_ - 1].frame == &f) [[likely]] {
      kind = frames_[top_ - 1].kind;
      --top_;
    } else if (!remove_below_top(f, kind)) {
      return;
    }
    if (kind == mode::replaying) {
      --replay_depth_;
      detail::frame_access::release(f);
    } else if (kind == mode::recording) {
      if (unwinding)
        detail::frame_access::release(f);
      else
        detail::frame_access::set(f, detail::frame_access::phase::ready);
    }
  }

  /// The plan a forward cast of `slot` uses given the recipe's live plan: the nearest replaying frame
  /// below the top decides (its snapshot, nothing recorded); recording frames above it reserve what
  /// was used as their own snapshot. `forward_slots` sizes a device snapshot's first allocation;
  /// `describe(slot)` names the slot in errors.
  template <class Describe>
  TEQUANT_ALWAYS_INLINE cast_plan plan_forward(slot_id slot, cast_plan plan, Backend& backend,
                                               std::size_t forward_slots, const void* owner, Describe&& describe) {
    adjust_forward(slot, plan, backend, forward_slots, owner, describe);
    return plan;
  }

  /// plan_forward for a caller that keeps the live plan (a cast handle): returns `kept` itself where the
  /// frames leave it as it is (one recording or inactive frame open: only the snapshot changes), else
  /// `scratch`, holding the adjusted copy. No plan passes in and out by value.
  template <class Describe>
  TEQUANT_ALWAYS_INLINE const cast_plan& plan_forward_kept(slot_id slot, const cast_plan& kept, cast_plan& scratch,
                                                           Backend& backend, std::size_t forward_slots,
                                                           const void* owner, Describe&& describe) {
    if constexpr (Backend::host_accessible) {
      if (top_ == 1 && frames_[0].kind != mode::replaying) [[likely]] {
        if (frames_[0].kind == mode::recording) record_in_top(slot, kept);
        return kept;
      }
    }
    scratch = kept;
    adjust_forward(slot, scratch, backend, forward_slots, owner, describe);
    return scratch;
  }

  /// Refuses state loading while frames are open or hold snapshots of the current scales.
  void require_quiescent(const std::string& where) const {
    detail::require(top_ == 0, where, ": called while ", top_,
                    " checkpoint frame(s) are open; load between steps");
    detail::require(outstanding_ == 0, where, ": ", outstanding_,
                    " checkpoint frame(s) still hold snapshots of the current scales; finish their replays (or "
                    "destroy the frames) before loading");
  }

 private:
  enum class mode : std::uint8_t { inactive, recording, replaying };
  struct entry {
    checkpoint_frame* frame;
    mode kind;
  };

  // What a frame may change in a plan (the general path below reads and writes nothing else).
  struct state_refs {
    const float* scale;
    float* amax;
    std::uint64_t* rng_offset;
  };

  // plan_forward on a plan in place: only its state pointers change.
  template <class Describe>
  TEQUANT_ALWAYS_INLINE void adjust_forward(slot_id slot, cast_plan& plan, Backend& backend, std::size_t forward_slots,
                                            const void* owner, Describe&& describe) {
    if constexpr (Backend::host_accessible) {
      // One frame open (a checkpointed layer's forward or its replay): inline. Nested frames and
      // frames inside a replay take the general path below.
      if (top_ == 1) [[likely]] {
        const entry top = frames_[0];
        if (top.kind == mode::recording) {
          record_in_top(slot, plan);
          return;
        }
        if (top.kind == mode::inactive || (plan.scale == nullptr && plan.rng_offset == nullptr)) {
          if (top.kind == mode::replaying) plan.amax = nullptr;
          return;
        }
        auto& snap = detail::frame_access::snapshot(*top.frame);
        const std::uint64_t key = detail::frame_key(slot);
        // A replay asks in the order its original forward recorded: find() compares one entry.
        const std::size_t pos = snap.find(key);
        if (pos == detail::snapshot_map::npos) [[unlikely]]
          missing_snapshot(*top.frame, slot, describe);
        // A replaying frame takes no new entries: these addresses hold until it ends.
        if (plan.scale != nullptr) plan.scale = &snap.value(pos);
        if (plan.rng_offset != nullptr) plan.rng_offset = &snap.rng_offset(pos);
        plan.amax = nullptr;
        return;
      }
    }
    // Only the three state pointers go out of line and back: passing the whole plan made the
    // compiler store all of it on every forward cast inside a frame, for the call it rarely makes.
    const state_refs n = plan_nested(slot, {plan.scale, plan.amax, plan.rng_offset}, backend, forward_slots, owner,
                                     describe);
    plan.scale = n.scale;
    plan.amax = n.amax;
    plan.rng_offset = n.rng_offset;
  }

  // The one open frame records: at the slot's first cast in it, what the cast depends on (nothing for a
  // plan without state).
  TEQUANT_ALWAYS_INLINE void record_in_top(slot_id slot, const cast_plan& plan) {
    if (plan.scale == nullptr && plan.rng_offset == nullptr) return;
    detail::frame_access::snapshot(*frames_[0].frame)
        .try_emplace(detail::frame_key(slot), plan.scale != nullptr ? *plan.scale : 0.0f,
                     plan.rng_offset != nullptr ? *plan.rng_offset : 0);
  }

  // Any number of frames: the nearest replaying frame below the top decides (its snapshot, nothing
  // recorded); recording frames above it reserve what was used as their own snapshot.
  template <class Describe>
  [[gnu::noinline]] state_refs plan_nested(slot_id slot, state_refs refs, Backend& backend, std::size_t forward_slots,
                                           const void* owner, Describe& describe) {
    cast_plan plan;
    plan.scale = refs.scale;
    plan.amax = refs.amax;
    plan.rng_offset = refs.rng_offset;
    plan = plan_nested_whole(slot, plan, backend, forward_slots, owner, describe);
    return {plan.scale, plan.amax, plan.rng_offset};
  }

  template <class Describe>
  cast_plan plan_nested_whole(slot_id slot, cast_plan plan, Backend& backend, std::size_t forward_slots,
                              const void* owner, Describe& describe) {
    std::size_t r = top_;
    while (r > 0 && frames_[r - 1].kind != mode::replaying) --r;
    if (plan.scale == nullptr && plan.rng_offset == nullptr) {  // the cast depends on no state: nothing to keep
      if (r > 0) plan.amax = nullptr;
      return plan;
    }
    const std::uint64_t key = detail::frame_key(slot);
    if constexpr (Backend::host_accessible) {
      (void)backend;
      (void)forward_slots;
      (void)owner;
      plan_on_host(key, r, plan, slot, describe);  // in place: a cast_plan is 64 bytes to copy
      return plan;
    } else {
      return plan_on_device(key, r, plan, backend, forward_slots, owner, slot, describe);
    }
  }

  // A guard closed out of LIFO order (misuse): removes `f` from below the top; false if not open.
  [[gnu::noinline]] bool remove_below_top(const checkpoint_frame& f, mode& kind) noexcept {
    std::size_t i = top_;
    while (i > 0 && frames_[i - 1].frame != &f) --i;
    if (i == 0) return false;
    kind = frames_[i - 1].kind;
    for (; i < top_; ++i) frames_[i - 1] = frames_[i];
    --top_;
    return true;
  }

  // The open frames live in the first top_ entries of frames_, which keeps its size: a step's frames
  // reuse the storage without an allocation (and without the vector's bookkeeping per push and pop).
  TEQUANT_ALWAYS_INLINE void push(entry e) {
    if (top_ == capacity_) [[unlikely]]
      grow();
    frames_[top_++] = e;
  }
  // capacity_ caches frames_.size(): the vector's size is a pointer difference and a shift per push.
  [[gnu::noinline]] void grow() {
    frames_.resize(std::max<std::size_t>(8, 2 * frames_.size()));
    capacity_ = frames_.size();
  }

  // The messages are built out of line: require()'s arguments would be evaluated on every call.
  [[noreturn, gnu::noinline, gnu::cold]] static void not_idle(const checkpoint_frame& f) {
    detail::fail("checkpoint_forward: frame '", f.name(), "' already holds a snapshot that no replay consumed (",
                 detail::frame_access::describe(detail::frame_access::get(f)), "); use one frame per checkpoint call");
  }
  [[noreturn, gnu::noinline, gnu::cold]] static void not_replayable(const checkpoint_frame& f, const void* owner) {
    using phase = detail::frame_access::phase;
    const phase p = detail::frame_access::get(f);
    detail::fail("checkpoint_replay: frame '", f.name(), "' has no snapshot to replay with (",
                 p == phase::ready && detail::frame_access::owner(f) != owner ? "it was recorded by another manager"
                                                                              : detail::frame_access::describe(p),
                 ")");
  }

  template <class Describe>
  [[noreturn, gnu::noinline, gnu::cold]] static void missing_snapshot(const checkpoint_frame& f, slot_id slot,
                                                                      Describe& describe) {
    detail::fail("checkpoint_replay: frame '", f.name(), "' has no snapshot of forward slot ", describe(slot),
                 ": its original forward did not cast this slot, so the replay cannot reproduce it");
  }

  template <class Describe>
  void plan_on_host(std::uint64_t key, std::size_t r, cast_plan& plan, slot_id slot, Describe& describe) {
    if (r > 0) {
      checkpoint_frame& f = *frames_[r - 1].frame;
      auto& snap = detail::frame_access::snapshot(f);
      const std::size_t pos = snap.find(key);
      if (pos == detail::snapshot_map::npos) missing_snapshot(f, slot, describe);
      // A replaying frame takes no new entries: these addresses hold until it ends.
      if (plan.scale != nullptr) plan.scale = &snap.value(pos);
      if (plan.rng_offset != nullptr) plan.rng_offset = &snap.rng_offset(pos);
      plan.amax = nullptr;
      for (std::size_t i = r; i < top_; ++i)
        if (frames_[i].kind == mode::recording)
          detail::frame_access::snapshot(*frames_[i].frame).try_emplace(key, snap.value(pos), snap.rng_offset(pos));
      return;
    }
    const float used = plan.scale != nullptr ? *plan.scale : 0.0f;
    const std::uint64_t rng = plan.rng_offset != nullptr ? *plan.rng_offset : 0;
    for (std::size_t i = 0; i < top_; ++i)
      if (frames_[i].kind == mode::recording) detail::frame_access::snapshot(*frames_[i].frame).try_emplace(key, used, rng);
  }

  // Backend memory the host cannot read: snapshots are stream-ordered backend-to-backend copies into
  // the frame's buffer, replays cast with pointers into it; nothing waits for the device.
  template <class Describe>
  cast_plan plan_on_device(std::uint64_t key, std::size_t r, cast_plan plan, Backend& backend, std::size_t forward_slots,
                           const void* owner, slot_id slot, Describe& describe) {
    const float* used = plan.scale;
    const std::uint64_t rng = plan.rng_offset != nullptr ? *plan.rng_offset : 0;
    std::uint64_t* rng_used = plan.rng_offset;
    if (r > 0) {
      checkpoint_frame& f = *frames_[r - 1].frame;
      auto& index = detail::frame_access::snapshot(f);
      const std::size_t pos = index.find(key);
      if (pos == detail::snapshot_map::npos) missing_snapshot(f, slot, describe);
      if (plan.scale != nullptr) used = plan.scale = detail::frame_access::device_storage(f)->data() + pos;
      if (plan.rng_offset != nullptr) rng_used = plan.rng_offset = &index.rng_offset(pos);
      plan.amax = nullptr;
    }
    for (std::size_t i = r; i < top_; ++i)
      if (frames_[i].kind == mode::recording)
        snapshot_on_device(*frames_[i].frame, key, used, rng_used != nullptr ? *rng_used : rng, backend, forward_slots,
                           owner);
    return plan;
  }

  // First use of `key` in a recording frame: reserve a position in its buffer and copy the scale in.
  // Strong guarantee: a failed allocation or copy leaves the frame as it was.
  static void snapshot_on_device(checkpoint_frame& f, std::uint64_t key, const float* src, std::uint64_t rng,
                                 Backend& backend, std::size_t forward_slots, const void* owner) {
    auto& index = detail::frame_access::snapshot(f);  // positions in the buffer; values unused
    if (index.find(key) != detail::snapshot_map::npos) return;
    auto& storage = detail::frame_access::device_storage(f);
    const std::size_t pos = index.size();
    using buffer_type = decltype(backend.template make_buffer<float>(std::size_t{}));
    const bool reuse = storage != nullptr && storage->owner() == owner &&
                       storage->kind() == &detail::snapshot_kind_tag<buffer_type>;
    if (!reuse || storage->capacity() <= pos) {
      // Room for every forward slot known now, so that a frame needs one allocation in its first step;
      // registrations inside a frame grow it geometrically.
      const std::size_t cap = std::max({forward_slots, pos + 1, reuse ? 2 * storage->capacity() : std::size_t{0}});
      auto grown = std::make_unique<detail::snapshot_buffer<buffer_type>>(backend.template make_buffer<float>(cap), cap,
                                                                         owner);
      if (reuse && pos != 0) backend.copy(grown->data(), storage->data(), pos);
      storage = std::move(grown);  // the old buffer's release (cudaFree) waits for the copy
    }
    index.try_emplace(key, 0.0f, rng);
    if (src == nullptr) return;
    try {
      backend.copy(storage->data() + pos, src, 1);
    } catch (...) {
      index.pop_back();
      throw;
    }
  }

  std::vector<entry> frames_;  // storage; the open frames are the first top_, the oldest first
  std::size_t capacity_ = 0;   // frames_.size()
  std::size_t top_ = 0;
  std::uint32_t replay_depth_ = 0;
  std::size_t outstanding_ = 0;
};

/// no_recompute's frames: there are none, and a cast gets the live plan.
template <class Backend>
struct no_frames {
  static constexpr bool empty() noexcept { return true; }
  static constexpr bool in_replay() noexcept { return false; }
  static constexpr std::uint32_t depth() noexcept { return 0; }
  static constexpr std::size_t outstanding() noexcept { return 0; }
  template <class Describe>
  static cast_plan plan_forward(slot_id, cast_plan plan, Backend&, std::size_t, const void*, Describe&&) noexcept {
    return plan;
  }
  static void require_quiescent(const std::string&) noexcept {}
};

}  // namespace tequant
