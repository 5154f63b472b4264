// SPDX-License-Identifier: Apache-2.0
// Exception safety: a fault at every callback point of a training step (forward, replay, backward,
// deferred weight gradient, the collective of the backward flush and of the forward update) leaves
// no open region, scope, frame or snapshot behind, and the next steps are normal. Misuse errors
// leave the state bit-identical (strong guarantee; see docs/reliability.md for the table).
#include <doctest/doctest.h>

#include <functional>
#include <optional>

#include <cstdint>
#include <type_traits>
#include <vector>

#include "check_error.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/comm/concepts.hpp"
#include "tequant/persistence/state.hpp"
#include "tequant/recipe/delayed.hpp"
#include "toy_model.hpp"

namespace {

/// A comm whose next `*fail_in`-th call throws (0 = never); models a failing collective.
struct flaky_comm {
  using policy_kind = tequant::comm_kind;
  int* fail_in = nullptr;
  void all_reduce_max(float*, std::size_t, std::uint32_t) {
    if (fail_in != nullptr && *fail_in > 0 && --*fail_in == 0) throw tequant::error("injected collective failure");
  }
  std::uint32_t rank() const noexcept { return 0; }
  std::uint32_t size(std::uint32_t) const noexcept { return 1; }
};
static_assert(tequant::amax_comm<flaky_comm>);

template <class Boundary>
struct rig {
  using manager = tequant::quantization_manager<tequant::delayed_scaling<>, Boundary, tequant::stacked_recompute, flaky_comm>;
  static constexpr bool scoped = std::is_same_v<Boundary, tequant::explicit_scope>;
  int fail_in = 0;
  manager m;
  rel::toy_model<manager> model;
  int k = 0;

  static tequant::delayed_params params() {
    tequant::delayed_params p;
    p.history_length = 4;
    return p;
  }
  rig() : m(params(), Boundary{}, flaky_comm{&fail_in}), model(m) {
    model.use_scope = scoped;
    for (int i = 0; i < 3; ++i) (void)model.step(k++);
  }

  void check_quiet() {
    const auto s = m.stats();
    CHECK(s.autocast_depth == 0);
    CHECK(s.scope_depth == 0);
    CHECK(s.checkpoint_depth == 0);
    CHECK(s.outstanding_snapshots == 0);
    CHECK_FALSE(m.in_replay());
    CHECK(m.grad_enabled());
  }

  /// Two steps after the fault: each runs exactly one forward and one backward update. After a
  /// logical backward that raised (`failed_backward`), the first one also runs that backward's kept
  /// update, at its first autocast entry (ARCHITECTURE §3).
  void check_next_steps_normal(bool failed_backward = false) {
    for (int i = 0; i < 2; ++i) {
      const auto before = m.stats();
      const float loss = model.step(k++);
      CHECK(loss == loss);  // not NaN
      const auto after = m.stats();
      CHECK(after.forward_updates == before.forward_updates + 1);
      // autocast_entry: the previous step's backward update is flushed at this step's entry.
      const unsigned kept = failed_backward && i == 0 && scoped ? 1u : 0u;
      CHECK(after.backward_updates == before.backward_updates + (before.pending || scoped ? 1u : 0u) + kept);
      CHECK(after.pending == !scoped);
      CHECK(m.deferred_weight_grads() == 0);
      check_quiet();
    }
  }
};

template <class Boundary>
void run_fault_cases() {
  SUBCASE("forward (inside a recording checkpoint frame)") {
    rig<Boundary> r;
    const auto before = r.m.stats();
    r.model.inject = rel::fault::forward;
    CHECK_THROWS_AS((void)r.model.step(r.k++), rel::fault_error);
    r.model.inject = rel::fault::none;
    r.check_quiet();
    CHECK(r.m.stats().forward_updates == before.forward_updates);  // no update during unwinding
    r.check_next_steps_normal();
  }
  SUBCASE("replay") {
    rig<Boundary> r;
    r.model.inject = rel::fault::replay;
    const auto before = r.m.stats();
    CHECK_THROWS_AS((void)r.model.step(r.k++), rel::fault_error);
    r.model.inject = rel::fault::none;
    r.check_quiet();
    CHECK(r.m.stats().backward_updates == before.backward_updates + (before.pending ? 1 : 0));
    if (rig<Boundary>::scoped) CHECK(r.m.stats().pending);  // the scope died unwinding: the update waits
    r.check_next_steps_normal(true);
  }
  SUBCASE("backward") {
    rig<Boundary> r;
    r.model.inject = rel::fault::backward;
    CHECK_THROWS_AS((void)r.model.step(r.k++), rel::fault_error);
    r.model.inject = rel::fault::none;
    r.check_quiet();
    r.check_next_steps_normal(true);
  }
  SUBCASE("collective of the forward update (autocast exit)") {
    rig<Boundary> r;
    const auto bytes = tequant::state_bytes(r.m);
    (void)bytes;
    r.fail_in = rig<Boundary>::scoped ? 1 : 2;  // autocast_entry: the entry's backward flush comes first
    const auto before = r.m.stats();
    CHECK_TEQUANT_ERROR((void)r.model.step(r.k++), "injected collective failure");
    r.check_quiet();
    CHECK(r.m.stats().forward_updates == before.forward_updates);
    r.check_next_steps_normal();
  }
}

}  // namespace

TEST_CASE("faults at every callback point: explicit_scope") { run_fault_cases<tequant::explicit_scope>(); }
TEST_CASE("faults at every callback point: autocast_entry") { run_fault_cases<tequant::autocast_entry>(); }

TEST_CASE("deferred weight-gradient work that throws is dropped with its logical backward") {
  rig<tequant::explicit_scope> r;
  r.model.inject = rel::fault::deferred_dw;
  CHECK_THROWS_AS((void)r.model.step(r.k++), rel::fault_error);
  r.model.inject = rel::fault::none;
  CHECK(r.m.deferred_weight_grads() == 0);  // nothing of the failed backward leaks into the next one
  CHECK(r.m.stats().pending);
  r.check_quiet();
  r.check_next_steps_normal(true);
}

TEST_CASE("a failing flush is strong: state unchanged, still pending, the retry equals a flush that never failed") {
  rig<tequant::autocast_entry> victim, reference;
  REQUIRE(victim.m.stats().pending);
  const auto before = tequant::state_bytes(victim.m);
  REQUIRE(before == tequant::state_bytes(reference.m));
  victim.fail_in = 1;
  CHECK_TEQUANT_ERROR(victim.m.flush_backward_update(), "injected collective failure");
  CHECK(tequant::state_bytes(victim.m) == before);
  CHECK(victim.m.stats().pending);
  victim.m.flush_backward_update();
  reference.m.flush_backward_update();
  CHECK_FALSE(victim.m.stats().pending);
  CHECK(tequant::state_bytes(victim.m) == tequant::state_bytes(reference.m));
  CHECK(tequant::state_bytes(victim.m) != before);
}

TEST_CASE("a failing flush at the backward scope's exit keeps the update pending for the next boundary") {
  rig<tequant::explicit_scope> r;
  r.fail_in = 2;  // the step's forward update succeeds, its backward flush fails
  const auto before = r.m.stats();
  CHECK_TEQUANT_ERROR((void)r.model.step(r.k++), "injected collective failure");
  r.check_quiet();
  CHECK(r.m.stats().pending);
  CHECK(r.m.stats().forward_updates == before.forward_updates + 1);
  CHECK(r.m.stats().backward_updates == before.backward_updates);
  CHECK(r.m.deferred_weight_grads() == 0);
  r.check_next_steps_normal();
}

TEST_CASE("checkpoint guards closed out of LIFO order, also while unwinding, leave consistent frames") {
  rig<tequant::autocast_entry> r;
  using guard = rig<tequant::autocast_entry>::manager::frame_guard;
  const tequant::slot_id s0 = r.m.slot(r.model.h[0], tequant::forward_role::input);
  const tequant::slot_id s1 = r.m.slot(r.model.h[1], tequant::forward_role::input);
  const float scale0 = r.m.scale(s0), scale1 = r.m.scale(s1);
  // Outer frame a, inner frame b; a's guard dies first (a guard kept in an optional by a user's
  // layer). Each frame must still hold the snapshot of its own casts.
  tequant::checkpoint_frame a("a"), b("b");
  {
    auto ac = r.m.autocast();
    std::optional<guard> ga, gb;
    ga.emplace(r.m.checkpoint_forward(a));
    CHECK(r.m.plan_cast(s0).scale != nullptr);
    gb.emplace(r.m.checkpoint_forward(b));
    CHECK(r.m.plan_cast(s1).scale != nullptr);
    CHECK(r.m.stats().checkpoint_depth == 2);
    ga.reset();
    CHECK(r.m.stats().checkpoint_depth == 1);
    gb.reset();
    CHECK(r.m.stats().checkpoint_depth == 0);
    CHECK(r.m.stats().outstanding_snapshots == 2);
    auto no_update = r.m.grad_mode(false);  // the region's exit runs no forward update
  }
  // The live scales move (a forward update of large amaxes); each replay must cast with what its own
  // frame recorded.
  {
    auto ac = r.m.autocast();
    *r.m.plan_cast(s0).amax = 1000.0f;
    *r.m.plan_cast(s1).amax = 1000.0f;
  }
  REQUIRE(r.m.scale(s0) != scale0);
  REQUIRE(r.m.scale(s1) != scale1);
  {
    auto rb = r.m.checkpoint_replay(b);
    CHECK(*r.m.plan_cast(s1).scale == scale1);
    CHECK(r.m.plan_cast(s1).amax == nullptr);
  }
  {
    auto ra = r.m.checkpoint_replay(a);
    CHECK(*r.m.plan_cast(s0).scale == scale0);
  }
  CHECK(r.m.stats().outstanding_snapshots == 0);

  // The same misuse while an exception unwinds: both recordings are dropped (an unwound forward has
  // no replay), nothing stays open, and the next steps are normal.
  tequant::checkpoint_frame c("c"), d("d");
  try {
    auto ac = r.m.autocast();
    std::optional<guard> gd;  // declared first, so destroyed last: out of LIFO order
    std::optional<guard> gc;
    gc.emplace(r.m.checkpoint_forward(c));
    (void)r.m.plan_cast(s0);
    gd.emplace(r.m.checkpoint_forward(d));
    (void)r.m.plan_cast(s1);
    throw rel::fault_error{};
  } catch (const rel::fault_error&) {
  }
  r.check_quiet();
  CHECK_TEQUANT_ERROR((void)r.m.checkpoint_replay(c), "'c' has no snapshot");
  CHECK_TEQUANT_ERROR((void)r.m.checkpoint_replay(d), "'d' has no snapshot");
  r.check_next_steps_normal();
}

namespace {
/// Runs a checkpointed cast of `slot` when destroyed: during unwinding, a recording frame that opens
/// and closes while an exception propagates.
template <class Manager>
struct checkpoints_when_destroyed {
  Manager& m;
  tequant::checkpoint_frame& frame;
  tequant::slot_id slot;
  ~checkpoints_when_destroyed() {
    auto g = m.checkpoint_forward(frame);
    (void)m.plan_cast(slot);
  }
};
}  // namespace

TEST_CASE("a recording frame is unwound when it closes while more exceptions propagate than at its entry, or, "
          "inside an outermost autocast region, than at the region's entry") {
  rig<tequant::autocast_entry> r;
  using manager = rig<tequant::autocast_entry>::manager;
  const tequant::slot_id s0 = r.m.slot(r.model.h[0], tequant::forward_role::input);
  const auto replays = [&](tequant::checkpoint_frame& f) {
    auto g = r.m.checkpoint_replay(f);
    return r.m.plan_cast(s0).amax == nullptr;
  };
  // Exceptions raised and caught inside the frame, or before it inside the region: the frame's own
  // forward completed, its snapshot stays.
  tequant::checkpoint_frame inside("caught inside"), handler("opened in a handler");
  {
    auto ac = r.m.autocast();
    {
      auto g = r.m.checkpoint_forward(inside);
      try {
        throw rel::fault_error{};
      } catch (const rel::fault_error&) {
      }
      (void)r.m.plan_cast(s0);
    }
    try {
      throw rel::fault_error{};
    } catch (const rel::fault_error&) {
      auto g = r.m.checkpoint_forward(handler);  // a caught exception no longer propagates
      (void)r.m.plan_cast(s0);
    }
    auto no_update = r.m.grad_mode(false);
  }
  CHECK(inside.has_snapshot());
  CHECK(handler.has_snapshot());
  CHECK(replays(inside));
  CHECK(replays(handler));
  r.check_quiet();
  // A frame that opens and closes during the unwinding of an exception raised inside the outermost
  // region is part of that failed forward: no snapshot stays.
  tequant::checkpoint_frame during("during unwinding");
  try {
    auto ac = r.m.autocast();
    checkpoints_when_destroyed<manager> d{r.m, during, s0};
    throw rel::fault_error{};
  } catch (const rel::fault_error&) {
  }
  CHECK_FALSE(during.has_snapshot());
  r.check_quiet();
  // Outside any region the frame's own entry is the reference: the same frame keeps its snapshot.
  tequant::checkpoint_frame outside("outside a region");
  try {
    checkpoints_when_destroyed<manager> d{r.m, outside, s0};
    throw rel::fault_error{};
  } catch (const rel::fault_error&) {
  }
  CHECK(outside.has_snapshot());
  CHECK(r.m.stats().outstanding_snapshots == 1);
  CHECK(replays(outside));
  r.check_quiet();
  r.check_next_steps_normal();
}

TEST_CASE("misuse raises tequant errors and leaves the state bit-identical (strong guarantee)") {
  rig<tequant::explicit_scope> r;
  const auto before = tequant::state_bytes(r.m);
  const auto stats = r.m.stats();
  CHECK_TEQUANT_ERROR(r.m.request_backward_update(), "outside backward_scope()");
  CHECK_TEQUANT_ERROR(r.m.run_deferred_weight_grads(), "outside backward_scope()");
  CHECK_TEQUANT_ERROR(r.m.register_module("bad", 0), "num_gemms must be >= 1");
  CHECK_TEQUANT_ERROR((void)r.m.slot(tequant::module_handle{9}, tequant::forward_role::input), "not registered");
  CHECK_TEQUANT_ERROR((void)r.m.slot(r.model.h[0], tequant::forward_role::input, 1), "has 1 GEMMs");
  CHECK_TEQUANT_ERROR((void)r.m.plan_cast(tequant::slot_id{tequant::direction::forward, 7, 0}), "does not belong");
  {
    // The ownership check per direction: a real bucket and index under the other direction, an index
    // past the bucket, a direction that does not exist (plan_cast's path and the general one).
    const tequant::slot_id f = r.m.slot(r.model.h[0], tequant::forward_role::output);
    const tequant::slot_id b = r.m.slot(r.model.h[0], tequant::backward_role::grad_input);
    const auto other = [](tequant::direction d) {
      return d == tequant::direction::forward ? tequant::direction::backward : tequant::direction::forward;
    };
    CHECK_NOTHROW((void)r.m.staging_amax(f));
    CHECK_TEQUANT_ERROR((void)r.m.plan_cast(tequant::slot_id{other(f.dir), f.bucket, f.index}), "does not belong");
    CHECK_TEQUANT_ERROR((void)r.m.plan_cast(tequant::slot_id{other(b.dir), b.bucket, b.index}), "does not belong");
    CHECK_TEQUANT_ERROR((void)r.m.plan_cast(tequant::slot_id{f.dir, f.bucket, 1u << 30}), "does not belong");
    CHECK_TEQUANT_ERROR((void)r.m.plan_cast(tequant::slot_id{b.dir, b.bucket, 1u << 30}), "does not belong");
    CHECK_TEQUANT_ERROR((void)r.m.plan_cast(tequant::slot_id{static_cast<tequant::direction>(2), b.bucket, b.index}),
                        "does not belong");  // would pass as a backward slot without the direction compare
    CHECK_TEQUANT_ERROR((void)r.m.scale(tequant::slot_id{static_cast<tequant::direction>(2), b.bucket, b.index}),
                        "does not belong");
    CHECK_TEQUANT_ERROR((void)r.m.staging_amax(tequant::slot_id{other(f.dir), f.bucket, f.index}), "does not belong");
  }
  CHECK_TEQUANT_ERROR(r.m.defer_weight_grad(std::function<void()>{}), "empty function");
  CHECK_TEQUANT_ERROR(r.m.defer_weight_grad(static_cast<void (*)()>(nullptr)), "empty function");
  tequant::checkpoint_frame f("never recorded");
  CHECK_TEQUANT_ERROR((void)r.m.checkpoint_replay(f), "'never recorded' has no snapshot");
  {
    tequant::checkpoint_frame g("partial");
    {
      std::optional<rig<tequant::explicit_scope>::manager::grad_mode_guard> no_update;  // the region's exit runs no forward update
      auto ac = r.m.autocast();
      {
        auto fg = r.m.checkpoint_forward(g);
        (void)r.m.plan_cast(r.m.slot(r.model.h[0], tequant::forward_role::input));
      }
      no_update.emplace(r.m.grad_mode(false));
    }
    auto rg = r.m.checkpoint_replay(g);
    CHECK_TEQUANT_ERROR((void)r.m.plan_cast(r.m.slot(r.model.h[1], tequant::forward_role::input)),
                        "frame 'partial' has no snapshot of forward slot 'layer1'.input");
  }
  CHECK(tequant::state_bytes(r.m) == before);
  const auto after = r.m.stats();
  CHECK(after.forward_updates == stats.forward_updates);
  CHECK(after.backward_updates == stats.backward_updates);
  r.check_quiet();
  r.check_next_steps_normal();
}
