// SPDX-License-Identifier: Apache-2.0
// Delayed weight-gradient work (backward_dw) registered during a backward and run later, inside the
// backward scope it belongs to.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "tequant/error.hpp"

namespace tequant::detail {

/// One registered item: any callable, moved in (copyable or not). Not std::function, whose header
/// costs every translation unit that includes the manager.
class deferred_item {
 public:
  template <class F>
  explicit deferred_item(F&& f) : impl_(std::make_unique<holder<std::decay_t<F>>>(std::forward<F>(f))) {}
  void operator()() { impl_->run(); }

 private:
  struct callable {
    virtual ~callable() = default;
    virtual void run() = 0;
  };
  template <class F>
  struct holder final : callable {
    explicit holder(F&& f) : fn(std::move(f)) {}
    explicit holder(const F& f) : fn(f) {}
    void run() override { fn(); }
    F fn;
  };
  std::unique_ptr<callable> impl_;
};

/// Whether `work` holds nothing to call (a null function pointer, an empty std::function).
template <class F>
bool empty_work(const F& work) noexcept {
  if constexpr (std::is_pointer_v<F> || std::is_member_pointer_v<F>) return work == nullptr;
  else if constexpr (requires { work.operator bool(); }) return !work.operator bool();
  else return false;
}

/// A thread-safe queue of work items. After any error nothing stays registered: work whose logical
/// backward failed must not leak into the next one.
class deferred_work {
 public:
  /// Registers `work` once `admit()` returns (the boundary may refuse: then nothing stays registered).
  /// An empty callable is refused before anything changes.
  template <class F, class Admit>
  void add(F&& work, Admit&& admit) {
    require(!empty_work(work), "defer_weight_grad: empty function");
    deferred_item item(std::forward<F>(work));
    try {
      admit();
    } catch (...) {
      clear();
      throw;
    }
    add(std::move(item));
  }
  void add(deferred_item work) {
    std::lock_guard<std::mutex> lock(mutex_);
    work_.push_back(std::move(work));
  }

  /// Runs the items in registration order, only `in_scope` (inside the backward scope they belong
  /// to; outside, they are dropped and it throws); if one throws, the rest are dropped and it propagates.
  void run(bool in_scope) {
    if (!in_scope) {
      clear();
      fail("run_deferred_weight_grads() outside backward_scope(): deferred weight-gradient work belongs to "
           "the logical backward; open manager.backward_scope() around the backward() call itself and run "
           "the deferred work inside that same scope (the registered work was dropped)");
    }
    std::vector<deferred_item> work;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      work.swap(work_);
    }
    for (auto& w : work) w();
  }

  void clear() noexcept {
    std::lock_guard<std::mutex> lock(mutex_);
    work_.clear();
  }

  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return work_.size();
  }

 private:
  mutable std::mutex mutex_;
  std::vector<deferred_item> work_;
};

}  // namespace tequant::detail
