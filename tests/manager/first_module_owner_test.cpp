// SPDX-License-Identifier: Apache-2.0
// TE's old "first module owns the backward update" rule on the same scenarios: the suite must see
// its failures (twice / too early / never), and that it works in the one case it was designed for.
#include <doctest/doctest.h>

#include "harness.hpp"

using namespace tq_test;
using fmo = fixture<tequant::first_module_owner>;

namespace {
/// Backward updates per step over `steps` steps (each step must give the same count).
template <class Step>
std::uint64_t backward_updates_per_step(fmo& f, Step step, int steps = 3) {
  std::uint64_t per = 0;
  for (int k = 0; k < steps; ++k) {
    const auto b = f.m.stats();
    step(f, k);
    f.sgd();
    const auto a = f.m.stats();
    CHECK(a.forward_updates - b.forward_updates == 1);
    CHECK(a.autocast_depth == 0);
    CHECK(a.outstanding_snapshots == 0);
    if (k == 0) per = a.backward_updates - b.backward_updates;
    CHECK(a.backward_updates - b.backward_updates == per);
  }
  return per;
}
}  // namespace

TEST_CASE("first_module_owner: a plain chain gets one update (the case the rule was made for)") {
  fmo f;
  CHECK(backward_updates_per_step(f, [](fmo& g, int k) {
    tensor y;
    {
      auto ac = g.m.autocast();
      y = g.seq(0, 2)(g.input(k));
    }
    g.backward(g.e.loss(y));
  }) == 1);
  CHECK(backward_staging(f.m) == 0.0f);
}

TEST_CASE("first_module_owner A: every replayed module of a reentrant checkpoint owns (twice)") {
  fmo f;
  CHECK(backward_updates_per_step(f, [](fmo& g, int k) {
    tensor y;
    {
      auto ac = g.m.autocast();
      y = g.e.checkpoint_reentrant(g.seq(0, 2), g.input(k));
    }
    g.backward(g.e.loss(y));
  }) == 3);
}

TEST_CASE("first_module_owner B: per-layer reentrant segments each own (twice)") {
  fmo f;
  CHECK(backward_updates_per_step(f, [](fmo& g, int k) {
    tensor h = g.input(k);
    {
      auto ac = g.m.autocast();
      for (int i = 0; i < 3; ++i) h = g.e.checkpoint_reentrant(g.seq(i, i), h);
    }
    g.backward(g.e.loss(h));
  }) == 3);
}

TEST_CASE("first_module_owner C: nested reentrant checkpoints (twice)") {
  fmo f;
  CHECK(backward_updates_per_step(f, [](fmo& g, int k) {
    auto outer = [&g](const tensor& x) { return g.seq(1, 2)(g.e.checkpoint_reentrant(g.seq(0, 0), x)); };
    tensor y;
    {
      auto ac = g.m.autocast();
      y = g.e.checkpoint_reentrant(outer, g.input(k));
    }
    g.backward(g.e.loss(y));
  }) == 3);
}

TEST_CASE("first_module_owner D: a nested autocast revives consumed ownership (twice)") {
  fmo f(2);
  CHECK(backward_updates_per_step(f, [](fmo& g, int k) {
    tensor z;
    {
      auto outer = g.m.autocast();
      tensor y;
      {
        auto inner = g.m.autocast();
        y = g.run(0, g.input(k));
      }
      z = g.run(1, y);
    }
    g.backward(g.e.loss(z));
  }) == 2);
}

TEST_CASE("first_module_owner E: inner autocast inside a checkpoint (twice)") {
  for (bool reentrant : {true, false}) {
    CAPTURE(reentrant);
    fmo f(2);
    CHECK(backward_updates_per_step(f, [reentrant](fmo& g, int k) {
      auto body = [&g](const tensor& x) {
        tensor h;
        {
          auto ac = g.m.autocast();
          h = g.run(0, x);
        }
        return g.run(1, h);
      };
      tensor y;
      {
        auto ac = g.m.autocast();
        y = reentrant ? g.e.checkpoint_reentrant(body, g.input(k)) : g.e.checkpoint_nonreentrant(body, g.input(k));
      }
      g.backward(g.e.loss(y));
    }) == 2);
  }
}

TEST_CASE("first_module_owner F: the owner's output does not reach the loss (never)") {
  fmo f(4);
  CHECK(backward_updates_per_step(f, [](fmo& g, int k) {
    tensor y;
    {
      auto ac = g.m.autocast();
      const tensor x = g.input(k);
      tensor unused = g.seq(0, 1)(x);
      y = g.seq(2, 3)(x);
    }
    g.backward(g.e.loss(y));
  }) == 0);
  CHECK(backward_staging(f.m) > 0.0f);  // the used branch's gradient amaxes were never committed
}

TEST_CASE("first_module_owner G: the owner's branch finishes first (too early) or replays own (twice)") {
  {
    fmo f(3);
    CHECK(backward_updates_per_step(f, [](fmo& g, int k) {
      tensor out;
      {
        auto ac = g.m.autocast();
        const tensor x = g.input(k);
        tensor ya = g.run(0, x);  // first in forward: the owner
        out = g.e.add(ya, g.seq(1, 2)(x));
      }
      g.backward(g.e.loss(out));
    }) == 1);
    // One update per step, but it ran before branch B's gradient casts: their amaxes stay staged and
    // B's backward scales lag one step behind.
    CHECK(f.m.staging_amax(f.m.slot(f.L(1).h, tequant::backward_role::grad_output)) > 0.0f);
  }
  {
    fmo f(3);
    CHECK(backward_updates_per_step(f, [](fmo& g, int k) {
      tensor out;
      {
        auto ac = g.m.autocast();
        const tensor x = g.input(k);
        tensor ya = g.run(0, x);
        out = g.e.add(ya, g.e.checkpoint_reentrant(g.seq(1, 2), x));
      }
      g.backward(g.e.loss(out));
    }) == 3);
  }
}

TEST_CASE("the fixed boundary on G commits branch B in the same step") {
  fixture<callback_boundary> f(3);
  tensor out;
  {
    auto ac = f.m.autocast();
    const tensor x = f.input(0);
    tensor ya = f.run(0, x);
    out = f.e.add(ya, f.seq(1, 2)(x));
  }
  f.backward(f.e.loss(out));
  CHECK(f.m.staging_amax(f.m.slot(f.L(1).h, tequant::backward_role::grad_output)) == 0.0f);
  CHECK(f.m.scale(f.m.slot(f.L(1).h, tequant::backward_role::grad_output)) != 1.0f);
}
