// SPDX-License-Identifier: Apache-2.0
// Delayed weight-gradient work (backward_dw) registered during a backward and run later, inside the
// backward scope it belongs to.
#pragma once
#include <cstddef>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "tequant/error.hpp"

namespace tequant::detail {

/// A thread-safe queue of work items. After any error nothing stays registered: work whose logical
/// backward failed must not leak into the next one.
class deferred_work {
 public:
  void add(std::function<void()> work) {
    require(static_cast<bool>(work), "defer_weight_grad: empty function");
    std::lock_guard<std::mutex> lock(mutex_);
    work_.push_back(std::move(work));
  }

  /// Runs the items in registration order; if one throws, the rest are dropped and it propagates.
  void run() {
    std::vector<std::function<void()>> work;
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
  std::vector<std::function<void()>> work_;
};

}  // namespace tequant::detail
