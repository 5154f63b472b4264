// SPDX-License-Identifier: Apache-2.0
// Many threads requesting during one backward give exactly one queued callback and one flush.
// Run under ThreadSanitizer in CI (label "concurrency").
#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "harness.hpp"

using namespace tq_test;

namespace {
/// Hooks of an engine whose worker threads are all inside one backward task.
struct shared_task {
  std::atomic<int> queued{0};
  void (*fn)(void*) = nullptr;
  void* ctx = nullptr;
};
struct mt_hooks {
  shared_task* t;
  bool in_backward() const noexcept { return true; }
  bool queue_callback(void (*fn)(void*), void* ctx) noexcept {
    if (t->queued.fetch_add(1) == 0) {
      t->fn = fn;
      t->ctx = ctx;
    }
    return true;
  }
};

constexpr int threads = 8, per_thread = 20000;

/// Each thread casts its own module's grad_output (so amax writes do not race) and requests.
template <class M>
void hammer(M& m, const std::vector<tequant::module_handle>& mods) {
  std::atomic<bool> go{false};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      while (!go.load()) std::this_thread::yield();
      const auto slot = m.slot(mods[static_cast<std::size_t>(t)], tequant::backward_role::grad_output);
      for (int i = 0; i < per_thread; ++i) {
        if (i % 1000 == 0) m.backend().max_accumulate(m.plan_cast(slot).amax, static_cast<float>(t + 1));
        m.request_backward_update();
      }
    });
  go = true;
  for (auto& th : pool) th.join();
}

template <class M>
std::vector<tequant::module_handle> modules(M& m) {
  std::vector<tequant::module_handle> r;
  for (int t = 0; t < threads; ++t) r.push_back(m.register_module("m" + std::to_string(t)));
  return r;
}
}  // namespace

TEST_CASE("concurrent requests under engine_callback: one callback, one flush") {
  shared_task task;
  tequant::quantization_manager<tequant::delayed_scaling<>, tequant::engine_callback<mt_hooks>> m(
      small_params(), tequant::engine_callback<mt_hooks>{mt_hooks{&task}});
  const auto mods = modules(m);
  for (int round = 1; round <= 3; ++round) {
    task.queued = 0;
    hammer(m, mods);
    CHECK(task.queued.load() == 1);
    CHECK(m.stats().pending);
    task.fn(task.ctx);  // the task ends
    CHECK(m.stats().backward_updates == static_cast<std::uint64_t>(round));
    CHECK_FALSE(m.stats().pending);
  }
  CHECK(m.scale(m.slot(mods[7], tequant::backward_role::grad_output)) == 57344.0f / 8.0f);
}

TEST_CASE_TEMPLATE("concurrent requests inside a scope / before an autocast entry: one flush", B, tequant::explicit_scope,
                   tequant::autocast_entry) {
  tequant::quantization_manager<tequant::delayed_scaling<>, B> m(small_params());
  const auto mods = modules(m);
  for (int round = 1; round <= 3; ++round) {
    if constexpr (std::is_same_v<B, tequant::explicit_scope>) {
      auto s = m.backward_scope();
      hammer(m, mods);
      CHECK(m.stats().backward_updates == static_cast<std::uint64_t>(round - 1));
    } else {
      hammer(m, mods);
      auto ac = m.autocast();
    }
    CHECK(m.stats().backward_updates == static_cast<std::uint64_t>(round));
    CHECK_FALSE(m.stats().pending);
  }
}
