// SPDX-License-Identifier: Apache-2.0
// engine_callback after a backward task that failed while holding the manager's callback (found by
// fuzz_api): the engine drops the callback, the manager's "queued" flag stays set until the next
// top-level autocast entry or backward scope outside any task (graph_hooks contract 3). Until then
// neither requests nor a backward_scope() inside the next task get a flush at that task's end.
#include <doctest/doctest.h>

#include "../manager/test_engine.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

using manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::engine_callback<tq_test::test_hooks>>;

struct rig {
  tq_test::task_stack ts;
  manager m{{}, tequant::engine_callback<tq_test::test_hooks>(tq_test::test_hooks{&ts})};
  tequant::slot_id grad_slot;

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
    body();
    if (!fails)
      for (std::size_t i = 0; i < ts.tasks.back().size(); ++i) ts.tasks.back()[i].fn(ts.tasks.back()[i].ctx);
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

TEST_CASE("engine_callback: after a failed task the update waits for the next top-level autocast entry") {
  for (const bool scope_in_next_task : {false, true}) {
    CAPTURE(scope_in_next_task);
    rig r;
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

// ARCHITECTURE §3: "the outermost scope exit (or, when the scope was opened inside a backward task,
// that task's end) flushes once". Not met after a failed task: the manager cannot tell its stale flag
// from a callback queued on a live enclosing task (graph_hooks has no task identity). Known deviation,
// reported; should_fail turns into a failure when the manager is fixed, so that this test is updated.
TEST_CASE("engine_callback: a scope inside the task after a failed one flushes by that task's end (known deviation)" *
          doctest::should_fail()) {
  rig r;
  r.failed_backward();
  r.task([&] {
    auto s = r.m.backward_scope();
    r.module_backward();
  }, false);
  CHECK(r.m.stats().backward_updates == 1);
  CHECK_FALSE(r.m.stats().pending);
}
