// SPDX-License-Identifier: Apache-2.0
// engine_callback after a backward task that failed while holding the manager's callback (found by
// fuzz_api), and nested backward tasks that are not checkpoint replays. With hooks that only meet
// graph_hooks' minimum, the engine drops the callback silently and the manager's "queued" flag stays
// set until the next top-level autocast entry (documented limit); hooks with a drop notice
// (hooks_with_drop_notice) clear it at once, so a retried backward flushes at its own end. Hooks with
// a task depth keep a nested task from queueing (and flushing) by itself.
#include <doctest/doctest.h>

#include <stdexcept>

#include "../manager/test_engine.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

template <class Hooks>
struct rig {
  using manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::engine_callback<Hooks>>;
  tq_test::task_stack ts;
  manager m{{}, tequant::engine_callback<Hooks>(make_hooks())};
  tequant::slot_id grad_slot;

  Hooks make_hooks() {
    Hooks h{};
    h.ts = &ts;
    return h;
  }
  rig() {
    const auto h = m.register_module("lin");
    grad_slot = m.slot(h, tequant::backward_role::grad_output);
  }
  // A module backward: a gradient cast (so that the update has something to commit) and the request.
  void module_backward() {
    const tequant::cast_plan p = m.plan_cast(grad_slot);
    m.backend().max_accumulate(p.amax, 2.0f);
    m.request_backward_update();
  }
  // As test_engine's backward(): callbacks run after the task's last node, or are dropped on failure.
  template <class Body>
  void task(Body body, bool fails) {
    ts.tasks.emplace_back();
    try {
      body();
    } catch (...) {
      drop();
      throw;
    }
    if (fails) {
      drop();
      return;
    }
    for (std::size_t i = 0; i < ts.tasks.back().size(); ++i) ts.tasks.back()[i].fn(ts.tasks.back()[i].ctx);
    ts.tasks.pop_back();
  }
  // A failed task: its callbacks are dropped (drop-notice hooks hear of it).
  void drop() {
    for (const auto& cb : ts.tasks.back())
      if (cb.dropped != nullptr) cb.dropped(cb.ctx);
    ts.tasks.pop_back();
  }
  // Step 1: a backward task that queued the callback and then failed.
  void failed_backward() {
    task([&] { module_backward(); }, true);
    CHECK(ts.queued == 1);
    CHECK(m.stats().pending);
    CHECK(m.stats().backward_updates == 0);
  }
};

}  // namespace

using basic = rig<tq_test::test_hooks>;
using full = rig<tq_test::full_test_hooks>;
static_assert(!tequant::hooks_with_drop_notice<tq_test::test_hooks>);
static_assert(tequant::hooks_with_drop_notice<tq_test::full_test_hooks>);
static_assert(tequant::hooks_with_task_depth<tq_test::full_test_hooks>);

TEST_CASE("engine_callback, minimal hooks: after a failed task the update waits for the next top-level autocast entry") {
  for (const bool scope_in_next_task : {false, true}) {
    CAPTURE(scope_in_next_task);
    basic r;
    r.failed_backward();
    // A retried backward (no forward in between), its requests optionally inside a scope.
    r.task([&] {
      if (scope_in_next_task) {
        auto s = r.m.backward_scope();
        r.module_backward();
      } else {
        r.module_backward();
      }
    }, false);
    CHECK(r.ts.queued == 1);  // the stale flag: nothing was queued on the second task
    // Not lost, flushed once at the fallback boundary, and only once.
    {
      auto ac = r.m.autocast();
    }
    CHECK(r.m.stats().backward_updates == 1);
    CHECK_FALSE(r.m.stats().pending);
    CHECK(r.m.staging_amax(r.grad_slot) == 0.0f);
    {
      auto ac = r.m.autocast();
    }
    CHECK(r.m.stats().backward_updates == 1);
    // Recovered: the next backward queues its callback and flushes at its end again.
    r.task([&] { r.module_backward(); }, false);
    CHECK(r.ts.queued == 2);
    CHECK(r.m.stats().backward_updates == 2);
    CHECK_FALSE(r.m.stats().pending);
  }
}

TEST_CASE("engine_callback, drop-notice hooks: a retried backward flushes at its own end") {
  for (const bool scope_in_next_task : {false, true}) {
    CAPTURE(scope_in_next_task);
    full r;
    r.failed_backward();
    r.task([&] {
      if (scope_in_next_task) {
        auto s = r.m.backward_scope();
        r.module_backward();
      } else {
        r.module_backward();
      }
    }, false);
    CHECK(r.ts.queued == 2);  // the drop notice cleared the flag: the retry queued its own callback
    CHECK(r.m.stats().backward_updates == 1);
    CHECK_FALSE(r.m.stats().pending);
    CHECK(r.m.staging_amax(r.grad_slot) == 0.0f);
    {
      auto ac = r.m.autocast();  // nothing left for the fallback boundary
    }
    CHECK(r.m.stats().backward_updates == 1);
  }
}

TEST_CASE("engine_callback: a nested backward task that is not a replay does not flush by itself") {
  // The shape of a custom op whose backward runs backward() on a sub-graph (gradient penalty, per-sample
  // tricks): outer node 1 runs a nested task whose node casts and requests; outer node 2 does too.
  full r;
  r.task([&] {
    r.task([&] { r.module_backward(); }, false);  // nested: depth 1
    CHECK(r.m.stats().backward_updates == 0);
    CHECK(r.m.stats().pending);
    r.module_backward();  // outer node 2
  }, false);
  CHECK(r.ts.queued == 1);
  CHECK(r.m.stats().backward_updates == 1);  // exactly once, at the outer task's end
  CHECK_FALSE(r.m.stats().pending);

  // Only the nested task requests: the outer task's end cannot flush (nothing was queued on it), the
  // next top-level autocast entry does, once.
  r.task([&] { r.task([&] { r.module_backward(); }, false); }, false);
  CHECK(r.m.stats().backward_updates == 1);
  CHECK(r.m.stats().pending);
  {
    auto ac = r.m.autocast();
  }
  CHECK(r.m.stats().backward_updates == 2);

  // A nested task that raises inside the outer one: the outer task still flushes once.
  r.task([&] {
    try {
      r.task([&] {
        r.module_backward();
        throw std::runtime_error("nested node failed");
      }, true);
    } catch (const std::runtime_error&) {
    }
    r.module_backward();
  }, false);
  CHECK(r.m.stats().backward_updates == 3);
  CHECK_FALSE(r.m.stats().pending);
}

TEST_CASE("engine_callback, minimal hooks: a nested task that is not a replay flushes too early (documented limit)") {
  basic r;
  r.task([&] {
    r.task([&] { r.module_backward(); }, false);
    r.module_backward();
  }, false);
  // Without task_depth() the nested task looks like a logical backward: two updates. This is why the
  // shipped engine hooks (libtorch, the examples' engine) implement hooks_with_task_depth.
  CHECK(r.m.stats().backward_updates == 2);
}
