// SPDX-License-Identifier: Apache-2.0
// One activation-checkpoint frame: its original forward and its later replay share it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "tequant/checkpoint/snapshot_map.hpp"

namespace tequant {

namespace detail {
struct frame_access;

/// A frame's snapshot in backend memory, for backends whose memory the host cannot read (cuda_backend):
/// type-erased so that checkpoint_frame stays one type whatever the backend. The manager that made it
/// owns its layout; casts of a replay read their scales from it without a host synchronisation.
class snapshot_storage {
 public:
  snapshot_storage() = default;
  snapshot_storage(const snapshot_storage&) = delete;
  snapshot_storage& operator=(const snapshot_storage&) = delete;
  virtual ~snapshot_storage() = default;
  virtual float* data() noexcept = 0;
  virtual std::size_t capacity() const noexcept = 0;
  /// The manager that allocated it (another manager, or another buffer type, reallocates).
  virtual const void* owner() const noexcept = 0;
  virtual const void* kind() const noexcept = 0;
};
}  // namespace detail

/// Owned by whoever owns the checkpointed region (for an autograd engine: the checkpoint node), and
/// passed to both `checkpoint_forward` and `checkpoint_replay`. Holds what its original forward cast
/// with (the autocast state; per forward slot, filled lazily at first use, the scale and random-number
/// offset) until its replay ends or it is destroyed; with
/// a device backend they live in device memory, which the frame keeps (for the next step) until it
/// is destroyed. A frame must not outlive the manager that recorded it. It may be reused for the next step once
/// its replay ended.
class checkpoint_frame {
 public:
  explicit checkpoint_frame(std::string name = "checkpoint") : name_(std::move(name)) {}
  checkpoint_frame(const checkpoint_frame&) = delete;
  checkpoint_frame& operator=(const checkpoint_frame&) = delete;
  ~checkpoint_frame() { release(); }

  /// The name error messages use.
  const std::string& name() const noexcept { return name_; }
  /// True from an eligible original forward until the replay ends (or the frame is destroyed).
  bool has_snapshot() const noexcept { return phase_ != phase::idle; }
  /// Number of slots whose scale the snapshot holds.
  std::size_t snapshot_slots() const noexcept { return snapshot_.size(); }

 private:
  friend struct detail::frame_access;
  enum class phase : std::uint8_t { idle, recording, ready, replaying };

  // The storage stays (host map and backend buffer): the next step's snapshot reuses it without an
  // allocation (which, on a device, could synchronise) and pointers of a finished replay never dangle.
  void release() noexcept {
    snapshot_.clear();
    if (outstanding_ != nullptr) --*outstanding_;
    outstanding_ = nullptr;
    owner_ = nullptr;
    phase_ = phase::idle;
  }

  std::string name_;
  phase phase_ = phase::idle;
  bool enabled_ = false;  // the autocast state at the original forward: what its replay casts with
  // (bucket << 32 | index) -> scale used (host-accessible backends); other backends keep the scale
  // at the entry's position in device_ and leave the value unused.
  detail::snapshot_map snapshot_;
  std::unique_ptr<detail::snapshot_storage> device_;
  std::size_t* outstanding_ = nullptr;                // the recording manager's snapshot counter
  const void* owner_ = nullptr;                       // the recording manager
};

}  // namespace tequant
