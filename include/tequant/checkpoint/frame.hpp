// SPDX-License-Identifier: Apache-2.0
// One activation-checkpoint frame: its original forward and its later replay share it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>

namespace tequant {

namespace detail {
struct frame_access;
}

/// Owned by whoever owns the checkpointed region (for an autograd engine: the checkpoint node), and
/// passed to both `checkpoint_forward` and `checkpoint_replay`. Holds the scales its original forward
/// used (forward slots only, filled lazily at first use) until its replay ends or it is destroyed.
/// A frame must not outlive the manager that recorded it. It may be reused for the next step once
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
  std::size_t snapshot_slots() const noexcept { return scales_.size(); }

 private:
  friend struct detail::frame_access;
  enum class phase : std::uint8_t { idle, recording, ready, replaying };

  void release() noexcept {
    scales_.clear();
    if (outstanding_ != nullptr) --*outstanding_;
    outstanding_ = nullptr;
    owner_ = nullptr;
    phase_ = phase::idle;
  }

  std::string name_;
  phase phase_ = phase::idle;
  std::unordered_map<std::uint64_t, float> scales_;  // (bucket << 32 | index) -> scale used
  std::size_t* outstanding_ = nullptr;                // the recording manager's snapshot counter
  const void* owner_ = nullptr;                       // the recording manager
};

}  // namespace tequant
