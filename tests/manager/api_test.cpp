// SPDX-License-Identifier: Apache-2.0
// Misuse errors, the engine_callback fallback and callback placement, scopes inside tasks, several
// managers, stateless recipes, reduction groups and the zero-overhead layout.
#include <doctest/doctest.h>

#include <string>

#include "harness.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/recipe/block.hpp"
#include "tequant/recipe/current.hpp"
#include "tequant/recipe/mxfp8.hpp"

using namespace tq_test;

namespace {
struct empty_hooks {
  bool in_backward() const noexcept { return false; }
  bool queue_callback(void (*)(void*), void*) noexcept { return false; }
};

template <class Recipe>
constexpr bool zero_overhead() {
  using namespace tequant;
  using A = quantization_manager<Recipe, autocast_entry, no_recompute>;
  using S = quantization_manager<Recipe, explicit_scope, no_recompute>;
  using R = quantization_manager<Recipe, autocast_entry, stacked_recompute>;
  // Empty boundary policies cost the same (nothing); no_recompute costs exactly a frame stack less.
  return sizeof(A) == sizeof(S) && sizeof(R) == sizeof(A) + sizeof(frame_stack<host_backend>);
}
}  // namespace

// Empty policies cost no byte; a stateless recipe's state is empty.
static_assert(zero_overhead<tequant::delayed_scaling<>>());
static_assert(zero_overhead<tequant::current_scaling>());
static_assert(zero_overhead<tequant::mxfp8_scaling>());
static_assert(zero_overhead<tequant::block_scaling>());
static_assert(std::is_empty_v<tequant::quantization_manager<tequant::current_scaling, tequant::autocast_entry>::recipe_state_type>);
static_assert(std::is_empty_v<tequant::quantization_manager<tequant::block_scaling, tequant::explicit_scope>::recipe_state_type>);

TEST_CASE("explicit_scope: a request outside a scope is an error") {
  fixture<tequant::explicit_scope> f;
  CHECK_THROWS_WITH_AS(f.m.request_backward_update(),
                       doctest::Contains("tequant: request_backward_update() outside backward_scope()"), tequant::error);
  tensor y;
  {
    auto ac = f.m.autocast();
    y = f.seq(0, 2)(f.input(0));
  }
  CHECK_THROWS_AS(f.e.backward(f.e.loss(y)), tequant::error);  // a module backward outside the scope
  CHECK(f.m.stats().backward_updates == 0);
}

TEST_CASE("deferred weight gradients outside a backward scope are an error") {
  fixture<callback_boundary> f;
  f.m.defer_weight_grad([] {});
  CHECK_THROWS_WITH_AS(f.m.run_deferred_weight_grads(),
                       doctest::Contains("tequant: run_deferred_weight_grads() outside backward_scope()"), tequant::error);
  CHECK(f.m.deferred_weight_grads() == 0);  // nothing stays registered after an error
  int ran = 0;
  f.m.defer_weight_grad([&] { ++ran; });
  {
    auto s = f.m.backward_scope();
    f.m.run_deferred_weight_grads();
  }
  CHECK(ran == 1);
  CHECK(f.m.deferred_weight_grads() == 0);
}

TEST_CASE("replays without a snapshot name the frame and the slot") {
  fixture<callback_boundary> f(2);
  tequant::checkpoint_frame never("never-recorded");
  CHECK_THROWS_WITH_AS((void)f.m.checkpoint_replay(never),
                       doctest::Contains("tequant: checkpoint_replay: frame 'never-recorded' has no snapshot"),
                       tequant::error);
  CHECK(f.m.stats().checkpoint_depth == 0);

  tequant::checkpoint_frame fr("layer-1-only");
  {
    auto ac = f.m.autocast();
    auto g = f.m.checkpoint_forward(fr);
    (void)f.m.plan_cast(f.m.slot(f.L(0).h, tequant::forward_role::input));
  }
  CHECK(fr.has_snapshot());
  CHECK(fr.snapshot_slots() == 1);
  CHECK(f.m.stats().outstanding_snapshots == 1);
  CHECK_THROWS_WITH_AS((void)f.m.checkpoint_forward(fr), doctest::Contains("already holds a snapshot"), tequant::error);
  {
    auto r = f.m.checkpoint_replay(fr);
    CHECK_THROWS_WITH_AS((void)f.m.plan_cast(f.m.slot(f.L(1).h, tequant::forward_role::weight)),
                         doctest::Contains("frame 'layer-1-only' has no snapshot of forward slot 'L2'.weight[gemm 0]"),
                         tequant::error);
    const auto p = f.m.plan_cast(f.m.slot(f.L(0).h, tequant::forward_role::input));
    CHECK(p.amax == nullptr);
    CHECK(*p.scale == 1.0f);
    CHECK(f.m.in_replay());
  }
  CHECK_FALSE(fr.has_snapshot());
  CHECK(f.m.stats().outstanding_snapshots == 0);
  CHECK_THROWS_AS((void)f.m.checkpoint_replay(fr), tequant::error);  // replayed once already

  fixture<callback_boundary> other;
  tequant::checkpoint_frame mine("mine");
  { auto g = f.m.checkpoint_forward(mine); }
  CHECK_THROWS_WITH_AS((void)other.m.checkpoint_replay(mine), doctest::Contains("another manager"), tequant::error);
}

TEST_CASE("a frame destroyed without replay releases its snapshot") {
  fixture<callback_boundary> f;
  {
    tequant::checkpoint_frame fr("dropped");
    { auto g = f.m.checkpoint_forward(fr); }
    CHECK(f.m.stats().outstanding_snapshots == 1);
  }
  CHECK(f.m.stats().outstanding_snapshots == 0);
}

TEST_CASE("engine_callback falls back to the next autocast entry where the hooks cannot queue") {
  fixture<callback_boundary> f;
  f.ts.can_queue = false;
  for (int k = 0; k < 3; ++k) {
    const auto b = f.m.stats();
    tensor y;
    {
      auto ac = f.m.autocast();
      y = f.e.checkpoint_reentrant(f.seq(0, 2), f.input(k));
    }
    f.backward(f.e.loss(y));
    const auto a = f.m.stats();
    CHECK(a.pending);
    CHECK(a.backward_updates - b.backward_updates == (k == 0 ? 0u : 1u));  // flushed at this step's entry
  }
  CHECK(f.ts.queued == 0);

  // A backward driven outside any engine task: requests alone, no task to queue on.
  fixture<callback_boundary> g;
  g.m.request_backward_update();
  CHECK(g.m.stats().pending);
  { auto ac = g.m.autocast(); }
  CHECK(g.m.stats().backward_updates == 1);
  CHECK_FALSE(g.m.stats().pending);
}

TEST_CASE("engine_callback: a backward_scope opened inside a task is flushed at the task's end") {
  fixture<callback_boundary> f;
  std::uint64_t at_scope_exit = 99;
  auto& m = f.m;
  tensor x = f.input(0);
  tensor y = f.e.make(x->data, {x}, {}, [&m, &at_scope_exit](tq_test::node&, const vec& g) {
    {
      auto s = m.backward_scope();
      m.request_backward_update();
    }
    at_scope_exit = m.stats().backward_updates;
    return std::vector<vec>{g};
  }, "scoped-node");
  f.e.backward(f.e.loss(y));
  CHECK(at_scope_exit == 0);
  CHECK(m.stats().backward_updates == 1);
  CHECK(f.ts.queued == 1);
  CHECK_FALSE(m.stats().pending);
}

TEST_CASE("engine_callback without a scope: several backward calls give several updates (TE J)") {
  fixture<callback_boundary> f;
  tensor h, z, hd;
  {
    auto ac = f.m.autocast();
    h = f.run(0, f.input(0));
    hd = leaf(h->data, true);
    z = f.seq(1, 2)(hd);
  }
  f.e.backward(f.e.loss(z));
  f.e.backward(h, hd->grad);
  CHECK(f.m.stats().backward_updates == 2);  // why multi-task backwards need backward_scope()
}

TEST_CASE("two managers in one process do not interact") {
  fixture<callback_boundary> a;
  fixture<tequant::autocast_entry, tequant::current_scaling> b;
  tensor y;
  {
    auto ac = a.m.autocast();
    auto bc = b.m.autocast(false);
    y = a.seq(0, 2)(a.input(0));
  }
  a.e.backward(a.e.loss(y));
  CHECK(a.m.stats().forward_updates == 1);
  CHECK(a.m.stats().backward_updates == 1);
  CHECK(b.m.stats().forward_updates == 0);
  CHECK(b.m.stats().autocast_depth == 0);
  CHECK_FALSE(b.m.stats().pending);
}

TEST_CASE("stateless recipes: casts compute their own scales, nothing to update or snapshot") {
  fixture<callback_boundary, tequant::current_scaling> f;
  for (int k = 0; k < 2; ++k) {
    tensor y;
    {
      auto ac = f.m.autocast();
      y = f.e.checkpoint_reentrant(f.seq(0, 2), f.input(k));
    }
    f.e.backward(f.e.loss(y));
  }
  const auto s = f.m.stats();
  CHECK(s.forward_updates == 0);
  CHECK(s.backward_updates == 0);
  CHECK_FALSE(s.pending);
  CHECK(s.outstanding_snapshots == 0);
  CHECK(f.ts.queued == 0);
  const auto p = f.m.plan_cast(f.m.slot(f.L(0).h, tequant::forward_role::input));
  CHECK(p.scale == nullptr);
  CHECK(p.amax == nullptr);
  CHECK_THROWS_AS((void)f.m.scale(f.m.slot(f.L(0).h, tequant::forward_role::input)), tequant::error);
}

TEST_CASE("registration: slots, buckets per (direction, group), one collective per bucket") {
  tequant::quantization_manager<tequant::delayed_scaling<>, tequant::explicit_scope> m;
  const auto a = m.register_module("a", 2);
  const auto b = m.register_module("b", 1, {1, 2});
  CHECK(m.bucket_count() == 4);
  CHECK(m.slot(a, tequant::forward_role::output, 1).index == 5);
  CHECK(m.slot(a, tequant::backward_role::grad_input, 1).index == 3);
  CHECK(m.slot(b, tequant::forward_role::input).bucket != m.slot(a, tequant::forward_role::input).bucket);
  CHECK(m.bucket(m.slot(b, tequant::backward_role::grad_output).bucket).group == 2);
  CHECK_THROWS_AS((void)m.slot(a, tequant::forward_role::input, 2), tequant::error);
  CHECK_THROWS_AS((void)m.slot(tequant::module_handle{7}, tequant::forward_role::input), tequant::error);
  CHECK_THROWS_AS((void)m.plan_cast(tequant::slot_id{tequant::direction::backward, 0, 0}), tequant::error);
  { auto ac = m.autocast(); }
  CHECK(m.stats().collectives == 2);  // forward buckets of groups 0 and 1
  { auto s = m.backward_scope(); }
  CHECK(m.stats().collectives == 4);
  CHECK(m.stats().backward_updates == 1);
  using M = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::explicit_scope>;
  auto bad = [] { M rejected(tequant::delayed_params{tequant::fp8_format::e5m2}); };
  CHECK_THROWS_AS(bad(), tequant::error);
}

TEST_CASE("forward update rules: outermost enabled exit, gradients on, not in a replay") {
  fixture<tequant::explicit_scope> f;
  {
    auto off = f.m.autocast(false);
    auto on = f.m.autocast(true);
  }
  CHECK(f.m.stats().forward_updates == 0);  // TE: the exiting outer region is disabled
  {
    auto ng = f.m.grad_mode(false);
    auto on = f.m.autocast();
  }
  CHECK(f.m.stats().forward_updates == 0);
  { auto on = f.m.autocast(); }
  CHECK(f.m.stats().forward_updates == 1);
}

namespace {
// An engine of one task at a time, reduced to what flush_control's settled fast path depends on.
struct settle_engine {
  bool in_task = false;
  void (*end)(void*) = nullptr;
  void (*drop)(void*) = nullptr;
  void* ctx = nullptr;
  int queued = 0;
};
struct settle_hooks {
  settle_engine* e;
  bool in_backward() const noexcept { return e->in_task; }
  bool queue_callback(void (*fn)(void*), void (*dropped)(void*), void* ctx) noexcept {
    e->end = fn;
    e->drop = dropped;
    e->ctx = ctx;
    ++e->queued;
    return true;
  }
  bool queue_callback(void (*fn)(void*), void* ctx) noexcept { return queue_callback(fn, nullptr, ctx); }
};
void count_update(void* n) { ++*static_cast<int*>(n); }
}  // namespace

// Once a request settles, later requests return after one load; every event after which a request
// would do something again must unsettle (each CHECK below fails if one of them does not).
TEST_CASE("settled requests: flushes, scope exits, dropped tasks and state loads unsettle") {
  int updates = 0;
  {
    tequant::flush_control<tequant::autocast_entry> fc({}, &count_update, &updates);
    fc.request();
    fc.request();  // settled: nothing to do
    CHECK(fc.pending());
    fc.flush();
    CHECK(updates == 1);
    fc.request();  // the flush unsettled: this one marks again
    CHECK(fc.pending());
    fc.restore_pending(false);  // a state load without a pending update
    fc.request();
    CHECK(fc.pending());
  }
  {
    tequant::flush_control<tequant::explicit_scope> fc({}, &count_update, &updates);
    fc.scope_enter();
    fc.request();  // inside the scope: settles
    fc.scope_exit(true);  // unwinding: no flush; outside the scope requests are errors again
    CHECK_THROWS_AS(fc.request(), tequant::error);
  }
  {
    settle_engine e;
    tequant::flush_control<tequant::engine_callback<settle_hooks>> fc(
        tequant::engine_callback<settle_hooks>(settle_hooks{&e}), &count_update, &updates);
    e.in_task = true;
    fc.request();
    fc.request();
    CHECK(e.queued == 1);
    e.in_task = false;
    e.drop(e.ctx);  // the task failed: its callback is dropped, the update stays pending
    e.in_task = true;
    fc.request();  // a retried backward queues again
    CHECK(e.queued == 2);
    const int before = updates;
    e.in_task = false;
    e.end(e.ctx);  // its end flushes
    CHECK(updates == before + 1);
    CHECK_FALSE(fc.pending());
    e.in_task = true;
    fc.request();  // the next backward queues and marks again
    CHECK(e.queued == 3);
    CHECK(fc.pending());
  }
  {
    settle_engine e;
    tequant::flush_control<tequant::engine_callback<settle_hooks>> fc(
        tequant::engine_callback<settle_hooks>(settle_hooks{&e}), &count_update, &updates);
    fc.request();  // outside any task: marks, queues nothing, does not settle
    CHECK(e.queued == 0);
    e.in_task = true;
    fc.request();  // inside one: queues
    CHECK(e.queued == 1);
  }
}
