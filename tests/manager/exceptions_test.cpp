// SPDX-License-Identifier: Apache-2.0
// A forward, a replay, a backward and a flush that throw leave the manager consistent (TE scenario O).
#include <doctest/doctest.h>

#include <stdexcept>

#include "harness.hpp"

using namespace tq_test;
using tequant::autocast_entry;
using tequant::explicit_scope;

#define BOUNDARIES callback_boundary, autocast_entry, explicit_scope

namespace {
template <class M>
void check_clean(const M& m) {
  const auto s = m.stats();
  CHECK(s.autocast_depth == 0);
  CHECK(s.scope_depth == 0);
  CHECK(s.checkpoint_depth == 0);
  CHECK(s.outstanding_snapshots == 0);
  CHECK_FALSE(m.in_replay());
  CHECK_FALSE(m.quantization_enabled());
  CHECK(m.grad_enabled());
}

template <class F>
void plain_step(F& f, int k) {
  tensor y;
  {
    auto ac = f.m.autocast();
    y = f.seq(0, 2)(f.input(k));
  }
  f.backward(f.e.loss(y));
}
}  // namespace

TEST_CASE_TEMPLATE("O: a checkpointed forward that throws", B, BOUNDARIES, tequant::first_module_owner) {
  for (bool reentrant : {true, false}) {
    CAPTURE(reentrant);
    fixture<B> f;
    auto failing = [&f](const tensor& x) -> tensor {
      (void)f.run(0, x);
      throw std::runtime_error("forward failed");
    };
    {
      auto ac = f.m.autocast();
      CHECK_THROWS_AS(reentrant ? f.e.checkpoint_reentrant(failing, f.input(0))
                                : f.e.checkpoint_nonreentrant(failing, f.input(0)),
                      std::runtime_error);
      CHECK(f.m.stats().checkpoint_depth == 0);
      CHECK(f.m.stats().outstanding_snapshots == 0);
      CHECK(f.m.grad_enabled());  // the reentrant forward's no_grad was restored
    }
    check_clean(f.m);
    if constexpr (std::is_same_v<B, tequant::first_module_owner>) {
      // #3213 test_original_forward_exception_restores_owner: the next step has exactly one owner.
      for (int k = 1; k < 3; ++k) {
        const auto b = f.m.stats();
        plain_step(f, k);
        CHECK(f.m.stats().backward_updates - b.backward_updates == 1);
        CHECK(f.m.stats().forward_updates - b.forward_updates == 1);
      }
    } else {
      check_steps(f, 3, [](auto& g, int k) { plain_step(g, k); });
    }
  }
}

TEST_CASE_TEMPLATE("O: a replay that throws", B, BOUNDARIES) {
  for (bool reentrant : {true, false}) {
    CAPTURE(reentrant);
    fixture<B> f;
    bool fail = false;
    auto body = [&f, &fail](const tensor& x) {
      tensor h = f.seq(0, 1)(x);
      if (fail && f.m.in_replay()) throw std::runtime_error("replay failed");
      return f.run(2, h);
    };
    auto step = [&](auto& g, int k) {
      tensor y;
      {
        auto ac = g.m.autocast();
        y = reentrant ? g.e.checkpoint_reentrant(body, g.input(k)) : g.e.checkpoint_nonreentrant(body, g.input(k));
      }
      g.backward(g.e.loss(y));
    };
    check_steps(f, 1, step);
    fail = true;
    CHECK_THROWS_AS(step(f, 1), std::runtime_error);
    check_clean(f.m);
    // No module requested before the replay failed; explicit_scope's scope entry marked it pending
    // (unconditionally, as it must) and its exceptional exit kept it so.
    CHECK(f.m.stats().pending == std::is_same_v<B, explicit_scope>);
    fail = false;
    f.sgd();
    // ARCHITECTURE §3: the failed logical backward's update (explicit_scope: the one its scope kept)
    // runs once, at the next top-level autocast entry, before and apart from this step's own.
    const auto b = f.m.stats();
    step(f, 2);
    f.sgd();
    const auto a = f.m.stats();
    if constexpr (std::is_same_v<B, explicit_scope>) CHECK(a.backward_updates - b.backward_updates == 2);
    if constexpr (std::is_same_v<B, callback_boundary>) CHECK(a.backward_updates - b.backward_updates == 1);
    if constexpr (std::is_same_v<B, autocast_entry>) {
      CHECK(a.backward_updates - b.backward_updates == 0);  // its own waits for the next entry
      f.m.flush_backward_update();
    }
    check_steps(f, 3, step);
  }
}

TEST_CASE_TEMPLATE("O: a module backward that throws after other modules requested", B, BOUNDARIES) {
  fixture<B> f;
  f.m.flush_backward_update();
  f.L(0).throw_in_backward = true;  // the last module of the backward
  {
    tensor y;
    {
      auto ac = f.m.autocast();
      y = f.seq(0, 2)(f.input(0));
    }
    CHECK_THROWS_AS(f.backward(f.e.loss(y)), std::runtime_error);
  }
  check_clean(f.m);
  CHECK(f.m.stats().pending);  // L3 and L2 recorded and requested: the update is kept for the next boundary
  CHECK(f.m.stats().backward_updates == 0);
  f.L(0).throw_in_backward = false;
  for (auto& l : f.layers) std::fill(l->dw.begin(), l->dw.end(), 0.0f);
  const auto b = f.m.stats();
  plain_step(f, 1);
  const auto a = f.m.stats();
  CHECK(a.forward_updates - b.forward_updates == 1);
  // Every fixed boundary flushes the kept update at the next top-level autocast entry, as the failed
  // step's own update (never merged into the next one); then the step's own update follows (under
  // autocast_entry at the entry after).
  if constexpr (std::is_same_v<B, callback_boundary>) CHECK(a.backward_updates - b.backward_updates == 2);
  if constexpr (std::is_same_v<B, autocast_entry>) CHECK(a.backward_updates - b.backward_updates == 1);
  if constexpr (std::is_same_v<B, explicit_scope>) CHECK(a.backward_updates - b.backward_updates == 2);
  f.sgd();
  if constexpr (std::is_same_v<B, autocast_entry>) f.m.flush_backward_update();
  check_steps(f, 2, [](auto& g, int k) { plain_step(g, k); });
}

namespace {
/// A communicator that fails while armed.
struct flaky_comm {
  using policy_kind = tequant::comm_kind;
  bool* fail = nullptr;
  int* calls = nullptr;
  void all_reduce_max(float*, std::size_t, std::uint32_t) {
    ++*calls;
    if (*fail) throw tequant::error("flaky_comm: all-reduce failed");
  }
  std::uint32_t rank() const noexcept { return 0; }
  std::uint32_t size(std::uint32_t) const noexcept { return 1; }
};
}  // namespace

TEST_CASE("a failed flush leaves the update pending; a failed forward update keeps the staged amaxes") {
  bool fail = false;
  int calls = 0;
  using M = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::explicit_scope, tequant::stacked_recompute,
                                          flaky_comm>;
  M m(small_params(), {}, flaky_comm{&fail, &calls});
  const auto h = m.register_module("L");
  const auto in = m.slot(h, tequant::forward_role::input);
  const auto go = m.slot(h, tequant::backward_role::grad_output);
  {
    auto ac = m.autocast();
    m.backend().max_accumulate(m.plan_cast(in).amax, 4.0f);
    fail = true;
    // The forward update runs in the region's destructor: it throws there, outside unwinding.
    CHECK_THROWS_WITH_AS([&] { auto moved = std::move(ac); }(), "tequant: flaky_comm: all-reduce failed", tequant::error);
  }
  CHECK(m.stats().forward_updates == 0);
  CHECK(m.stats().autocast_depth == 0);
  CHECK(m.staging_amax(in) == 4.0f);
  {
    auto sc = m.backward_scope();
    m.backend().max_accumulate(m.plan_cast(go).amax, 2.0f);
    m.request_backward_update();
    CHECK_THROWS_AS([&] { auto moved = std::move(sc); }(), tequant::error);
  }
  CHECK(m.stats().pending);
  CHECK(m.stats().scope_depth == 0);
  CHECK(m.stats().backward_updates == 0);
  fail = false;
  m.flush_backward_update();
  CHECK_FALSE(m.stats().pending);
  CHECK(m.stats().backward_updates == 1);
  CHECK(m.scale(go) == doctest::Approx(57344.0f / 2.0f));
  { auto ac = m.autocast(); }
  CHECK(m.stats().forward_updates == 1);
  CHECK(m.scale(in) == 448.0f / 4.0f);
}

TEST_CASE("a flush that fails inside the engine's callback stays pending for the next boundary") {
  bool fail = false;
  int calls = 0;
  using M = tequant::quantization_manager<tequant::delayed_scaling<>, callback_boundary, tequant::stacked_recompute,
                                          flaky_comm>;
  task_stack ts;
  M m(small_params(), callback_boundary{full_test_hooks{{&ts}}}, flaky_comm{&fail, &calls});
  engine<M> e(m, ts);
  fp8_linear<M> l(m, "L", hidden, hidden, 0.5f);
  tensor y;
  {
    auto ac = m.autocast();
    y = l(e, fixture<callback_boundary>::input(0));
  }
  fail = true;
  CHECK_THROWS_WITH_AS(e.backward(e.loss(y)), "tequant: flaky_comm: all-reduce failed", tequant::error);
  CHECK(m.stats().pending);
  CHECK(m.stats().backward_updates == 0);
  CHECK(ts.tasks.empty());
  fail = false;
  { auto ac = m.autocast(); }  // the next top-level entry retries
  CHECK_FALSE(m.stats().pending);
  CHECK(m.stats().backward_updates == 1);
  CHECK(m.scale(m.slot(l.h, tequant::backward_role::grad_output)) != 1.0f);
}
