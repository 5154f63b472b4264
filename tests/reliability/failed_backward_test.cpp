// SPDX-License-Identifier: Apache-2.0
// One rule for a logical backward that raises (ARCHITECTURE §3), the same under the three fixed
// boundaries: what it staged is kept and flushed once, as that step's backward update, at the next
// top-level autocast entry (before the next forward update); never merged into the next step's update,
// no collective while unwinding, nothing left queued. Training that goes on after the fault gives the
// same update count, scales, histories and losses under every fixed boundary.
#include <doctest/doctest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "../manager/harness.hpp"
#include "tequant/format/bits.hpp"

namespace {

using namespace tq_test;

struct run_trace {
  std::vector<float> losses;
  std::vector<std::uint64_t> backward_updates;  // after each step's backward (or its failure)
  std::vector<float> state;                     // every scale and history value at the end
  tequant::manager_stats stats{};
  int failures = 0;
};

// 6 steps of L1 -> L2 -> L3 -> loss; in step 2 a node below L1 raises after the three layers'
// backwards have cast their gradients and requested the update.
template <class Boundary>
run_trace train_with_fault(int failing_step) {
  fixture<Boundary> fx(3);
  run_trace t;
  for (int k = 0; k < 6; ++k) {
    bool fail = k == failing_step;
    tensor loss;
    {
      auto region = fx.m.autocast();
      const tensor x = fixture<Boundary>::input(k);
      const tensor guarded = fx.e.make(x->data, {x}, {}, [&fail](node&, const vec& g) -> std::vector<vec> {
        if (fail) throw std::runtime_error("injected: a node below the FP8 layers failed");
        return {g};
      }, "fault");
      loss = fx.e.loss(fx.seq(0, 2)(guarded));
    }
    t.losses.push_back(loss->data[0]);
    try {
      fx.backward(loss);
    } catch (const std::runtime_error&) {
      ++t.failures;
      const auto s = fx.m.stats();
      CHECK(s.pending);          // kept for the next top-level entry
      CHECK(s.scope_depth == 0);  // nothing left open
      CHECK(fx.ts.tasks.empty());
    }
    t.backward_updates.push_back(fx.m.stats().backward_updates);
    fx.sgd();
  }
  fx.m.flush_backward_update();  // autocast_entry's last update waits for an entry that never comes
  t.stats = fx.m.stats();
  t.state = full_state(fx.m);
  return t;
}

void check_same(const run_trace& a, const run_trace& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  for (std::size_t i = 0; i < a.losses.size(); ++i)
    CHECK(tequant::detail::float_bits(a.losses[i]) == tequant::detail::float_bits(b.losses[i]));
  REQUIRE(a.state.size() == b.state.size());
  for (std::size_t i = 0; i < a.state.size(); ++i)
    CHECK(tequant::detail::float_bits(a.state[i]) == tequant::detail::float_bits(b.state[i]));
  CHECK(a.stats.forward_updates == b.stats.forward_updates);
  CHECK(a.stats.backward_updates == b.stats.backward_updates);
  CHECK(a.stats.collectives == b.stats.collectives);
}

}  // namespace

TEST_CASE("a logical backward that raises: one update per step, the same training under every fixed boundary") {
  const run_trace cb = train_with_fault<callback_boundary>(2);
  const run_trace ac = train_with_fault<tequant::autocast_entry>(2);
  const run_trace sc = train_with_fault<tequant::explicit_scope>(2);
  for (const run_trace* t : {&cb, &ac, &sc}) {
    CHECK(t->failures == 1);
    CHECK(t->stats.forward_updates == 6);
    CHECK(t->stats.backward_updates == 6);  // the failed step's update is not merged into the next one
    CHECK_FALSE(t->stats.pending);
  }
  // The failed step's update runs at step 3's entry under every boundary, not at the failure.
  CHECK(cb.backward_updates[2] == 2);
  CHECK(sc.backward_updates[2] == 2);
  CHECK(cb.backward_updates[3] == 4);  // step 2's at the entry, step 3's at its task's end
  CHECK(sc.backward_updates[3] == 4);
  check_same(cb, ac);
  check_same(cb, sc);
  // The fault sits below every FP8 layer, so their gradients and amaxes were complete: keeping the
  // update and running it at the next entry (before step 3's forward) trains exactly like a run
  // without the fault. Merging it into step 3's update, or dropping it, would not.
  const run_trace clean = train_with_fault<callback_boundary>(-1);
  CHECK(clean.failures == 0);
  CHECK(clean.backward_updates[2] == 3);
  check_same(clean, cb);
}

TEST_CASE("engine_callback refuses hooks that point at no engine") {
  using manager = tequant::quantization_manager<tequant::delayed_scaling<>, callback_boundary>;
  CHECK_THROWS_WITH_AS(manager{small_params()}, doctest::Contains("not attached"), tequant::error);
  task_stack ts;
  CHECK_NOTHROW(manager{small_params(), callback_boundary(full_test_hooks{{&ts}})});
}
