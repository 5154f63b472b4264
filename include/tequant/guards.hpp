// SPDX-License-Identifier: Apache-2.0
// The manager's RAII guards. Each remembers what it must restore and hands one event back to the
// manager at its end; none of them decides anything.
#pragma once
#include <exception>
#include <utility>

#include "tequant/config.hpp"

namespace tequant {

/// An autocast region (see quantization_manager::autocast). Its destructor may throw when the forward
/// update fails.
template <class Manager>
class [[nodiscard]] autocast_region {
 public:
  autocast_region(autocast_region&& o) noexcept
      : m_(std::exchange(o.m_, nullptr)), enabled_(o.enabled_), prev_enabled_(o.prev_enabled_), memo_(o.memo_),
        uncaught_(o.uncaught_) {}
  autocast_region& operator=(autocast_region&&) = delete;
  ~autocast_region() noexcept(false) {
    if (m_ != nullptr) m_->exit_autocast(enabled_, prev_enabled_, memo_, uncaught_);
  }

 private:
  friend Manager;
  using memo_type = typename Manager::region_memo;
  // `uncaught`: std::uncaught_exceptions() at an outermost entry where the exit may run the forward
  // update or frames may open inside, else -1 (the manager asks the runtime only where something
  // depends on it: a call into libstdc++ each).
  autocast_region(Manager* m, bool enabled, bool prev_enabled, memo_type memo, int uncaught) noexcept
      : m_(m), enabled_(enabled), prev_enabled_(prev_enabled), memo_(memo), uncaught_(uncaught) {}
  Manager* m_;
  bool enabled_, prev_enabled_;
  memo_type memo_;
  int uncaught_;  // at construction, or -1: not watched
};

/// Sets the manager's grad mode until it dies.
template <class Manager>
class [[nodiscard]] grad_mode_guard {
 public:
  grad_mode_guard(grad_mode_guard&& o) noexcept : m_(std::exchange(o.m_, nullptr)), prev_(o.prev_) {}
  grad_mode_guard& operator=(grad_mode_guard&&) = delete;
  ~grad_mode_guard() {
    if (m_ != nullptr) m_->restore_grad_mode(prev_);
  }

 private:
  friend Manager;
  grad_mode_guard(Manager* m, bool prev) noexcept : m_(m), prev_(prev) {}
  Manager* m_;
  bool prev_;
};

/// A backward scope (see quantization_manager::backward_scope). Its destructor may throw when the
/// flush fails.
template <class Manager>
class [[nodiscard]] backward_scope_guard {
 public:
  backward_scope_guard(backward_scope_guard&& o) noexcept
      : m_(std::exchange(o.m_, nullptr)), uncaught_(o.uncaught_) {}
  backward_scope_guard& operator=(backward_scope_guard&&) = delete;
  ~backward_scope_guard() noexcept(false) {
    if (m_ != nullptr) m_->exit_scope(std::uncaught_exceptions() > uncaught_);
  }

 private:
  friend Manager;
  explicit backward_scope_guard(Manager* m) noexcept : m_(m), uncaught_(std::uncaught_exceptions()) {}
  Manager* m_;
  int uncaught_;
};

/// An open checkpoint frame (original forward or replay).
template <class Manager, class Frame>
class [[nodiscard]] frame_guard {
 public:
  frame_guard(frame_guard&& o) noexcept
      : m_(std::exchange(o.m_, nullptr)), frame_(o.frame_), prev_enabled_(o.prev_enabled_), uncaught_(o.uncaught_) {}
  frame_guard& operator=(frame_guard&&) = delete;
  TEQUANT_ALWAYS_INLINE ~frame_guard() {
    if (m_ != nullptr) m_->exit_frame(*frame_, prev_enabled_, uncaught_ >= 0 && std::uncaught_exceptions() > uncaught_);
  }

 private:
  friend Manager;
  // `uncaught`: the count of propagating exceptions the exit compares with, or -1 where the exit need
  // not know whether it unwinds (it then reports "not unwinding" without asking the runtime).
  frame_guard(Manager* m, Frame* f, bool prev_enabled, int uncaught) noexcept
      : m_(m), frame_(f), prev_enabled_(prev_enabled), uncaught_(uncaught) {}
  Manager* m_;
  Frame* frame_;
  bool prev_enabled_;
  int uncaught_;  // see the constructor
};

}  // namespace tequant
