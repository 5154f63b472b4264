// SPDX-License-Identifier: Apache-2.0
// A boundary policy written outside the library: the backward update runs once every k logical
// backwards (amaxes max-accumulate in between), at the next top-level autocast entry or at a
// backward_scope() exit. It uses only tequant's public concepts; nothing in tequant names it.
#pragma once
#include <atomic>
#include <cstdint>

#include <tequant/boundary/concepts.hpp>
#include <tequant/error.hpp>
#include <tequant/policy.hpp>

namespace custom {

// example-begin every_k_backwards
class every_k_backwards {
 public:
  using policy_kind = tequant::boundary_kind;

  every_k_backwards() = default;  // k = 1: every logical backward, like autocast_entry
  explicit every_k_backwards(std::uint32_t k) : k_(k) {
    if (k == 0) throw tequant::error("tequant: every_k_backwards: k must be at least 1");
  }
  // Policies are nothrow movable; the counter is plain state, the request flag an atomic.
  every_k_backwards(every_k_backwards&& o) noexcept
      : k_(o.k_), seen_(o.seen_), requested_(o.requested_.load(std::memory_order_relaxed)) {}
  every_k_backwards& operator=(every_k_backwards&&) = delete;

  std::uint32_t k() const noexcept { return k_; }
  /// Logical backwards counted since the last update.
  std::uint32_t seen() const noexcept { return seen_; }

  /// Module backwards may call this from several threads: an atomic store, no lock.
  template <class Port>
  void on_request(Port& port) noexcept {
    port.mark_pending();
    requested_.store(true, std::memory_order_relaxed);
  }
  /// The next step's first autocast entry ends a logical backward that requested.
  template <class Port>
  void on_top_level_entry(Port& port) {
    if (requested_.exchange(false, std::memory_order_relaxed)) count(port);
  }
  /// A backward scope is one logical backward whether or not its modules requested.
  template <class Port>
  void on_scope_exit(Port& port, bool /*handed_over*/) {
    requested_.store(false, std::memory_order_relaxed);
    count(port);
  }

 private:
  template <class Port>
  void count(Port& port) {
    if (++seen_ < k_) return;
    port.flush();  // on failure the update stays pending and the count full: the next boundary retries
    seen_ = 0;
  }

  std::uint32_t k_ = 1;
  std::uint32_t seen_ = 0;
  std::atomic<bool> requested_{false};
};

static_assert(tequant::boundary_strategy<every_k_backwards>);
// example-end every_k_backwards

}  // namespace custom
