// SPDX-License-Identifier: Apache-2.0
// TE's bug scenarios (te-semantics §7) on one process, for every fixed boundary policy: exactly one
// forward and one backward update per step, nothing pending, depths 0, no outstanding snapshot.
#include <doctest/doctest.h>

#include "harness.hpp"

using namespace tq_test;
using tequant::autocast_entry;
using tequant::explicit_scope;

#define BOUNDARIES callback_boundary, autocast_entry, explicit_scope

TEST_CASE_TEMPLATE("plain chain: (1,1) per step", B, BOUNDARIES) {
  fixture<B> fx;
  check_steps(fx, 4, [](auto& f, int k) {
    tensor y;
    {
      auto ac = f.m.autocast();
      y = f.seq(0, 2)(f.input(k));
    }
    f.backward(f.e.loss(y));
  });
}

TEST_CASE_TEMPLATE("A: reentrant checkpoint of the whole model", B, BOUNDARIES) {
  fixture<B> fx;
  check_steps(fx, 4, [](auto& f, int k) {
    tensor y;
    {
      auto ac = f.m.autocast();
      y = f.e.checkpoint_reentrant(f.seq(0, 2), f.input(k));
    }
    f.backward(f.e.loss(y));
  });
  if constexpr (std::is_same_v<B, callback_boundary>) CHECK(fx.ts.queued == 4);  // one callback per step
}

TEST_CASE_TEMPLATE("A': non-reentrant checkpoint of the whole model", B, BOUNDARIES) {
  fixture<B> fx;
  check_steps(fx, 4, [](auto& f, int k) {
    tensor y;
    {
      auto ac = f.m.autocast();
      y = f.e.checkpoint_nonreentrant(f.seq(0, 2), f.input(k));
    }
    f.backward(f.e.loss(y));
  });
}

TEST_CASE_TEMPLATE("B: per-layer checkpoints (reentrant and non-reentrant)", B, BOUNDARIES) {
  for (bool reentrant : {true, false}) {
    CAPTURE(reentrant);
    fixture<B> fx;
    check_steps(fx, 4, [reentrant](auto& f, int k) {
      tensor h = f.input(k);
      {
        auto ac = f.m.autocast();
        for (int i = 0; i < 3; ++i)
          h = reentrant ? f.e.checkpoint_reentrant(f.seq(i, i), h) : f.e.checkpoint_nonreentrant(f.seq(i, i), h);
      }
      f.backward(f.e.loss(h));
    });
  }
}

TEST_CASE_TEMPLATE("C: nested checkpoints (reentrant in reentrant, reentrant in non-reentrant)", B, BOUNDARIES) {
  for (bool outer_reentrant : {true, false}) {
    CAPTURE(outer_reentrant);
    fixture<B> fx;
    check_steps(fx, 4, [outer_reentrant](auto& f, int k) {
      auto outer = [&f](const tensor& x) { return f.seq(1, 2)(f.e.checkpoint_reentrant(f.seq(0, 0), x, "inner")); };
      tensor y;
      {
        auto ac = f.m.autocast();
        y = outer_reentrant ? f.e.checkpoint_reentrant(outer, f.input(k), "outer")
                            : f.e.checkpoint_nonreentrant(outer, f.input(k), "outer");
      }
      f.backward(f.e.loss(y));
    });
    if constexpr (std::is_same_v<B, callback_boundary>) CHECK(fx.ts.queued == 4);
  }
}

TEST_CASE_TEMPLATE("D: nested autocast does not revive ownership", B, BOUNDARIES) {
  fixture<B> fx(2);
  check_steps(fx, 4, [](auto& f, int k) {
    tensor z;
    {
      auto outer = f.m.autocast();
      tensor y;
      {
        auto inner = f.m.autocast();
        y = f.run(0, f.input(k));
      }
      z = f.run(1, y);
    }
    f.backward(f.e.loss(z));
  });
}

TEST_CASE_TEMPLATE("E: inner autocast inside a checkpoint", B, BOUNDARIES) {
  for (bool reentrant : {true, false}) {
    CAPTURE(reentrant);
    fixture<B> fx(2);
    check_steps(fx, 4, [reentrant](auto& f, int k) {
      auto body = [&f](const tensor& x) {
        tensor h;
        {
          auto ac = f.m.autocast();
          h = f.run(0, x);
        }
        return f.run(1, h);
      };
      tensor y;
      {
        auto ac = f.m.autocast();
        y = reentrant ? f.e.checkpoint_reentrant(body, f.input(k)) : f.e.checkpoint_nonreentrant(body, f.input(k));
      }
      f.backward(f.e.loss(y));
    });
  }
}

TEST_CASE_TEMPLATE("F: unused first branch (checkpointed or not) does not lose the update", B, BOUNDARIES) {
  for (int variant = 0; variant < 3; ++variant) {
    CAPTURE(variant);
    fixture<B> fx(4);
    check_steps(fx, 4, [variant](auto& f, int k) {
      tensor y;
      {
        auto ac = f.m.autocast();
        const tensor x = f.input(k);
        tensor unused = variant == 0   ? f.e.checkpoint_reentrant(f.seq(0, 1), x, "unused")
                        : variant == 1 ? f.e.checkpoint_nonreentrant(f.seq(0, 1), x, "unused")
                                       : f.seq(0, 1)(x);
        y = f.seq(2, 3)(x);
      }  // `unused` (and its frame) dies here, before the backward
      f.backward(f.e.loss(y));
    });
  }
}

TEST_CASE_TEMPLATE("G: sibling branches, one checkpointed, in FIFO engine order", B, BOUNDARIES) {
  for (bool ckpt : {false, true}) {
    CAPTURE(ckpt);
    fixture<B> fx(3);
    check_steps(fx, 4, [ckpt](auto& f, int k) {
      tensor out;
      {
        auto ac = f.m.autocast();
        const tensor x = f.input(k);
        tensor ya = f.run(0, x);
        tensor yb = ckpt ? f.e.checkpoint_reentrant(f.seq(1, 2), x) : f.seq(1, 2)(x);
        out = f.e.add(ya, yb);
      }
      f.backward(f.e.loss(out));
    });
    // The grad casts of the second branch ran after the first branch's module, yet were committed.
    if constexpr (!fixture<B>::flush_at_next_entry) CHECK(backward_staging(fx.m) == 0.0f);
  }
}

TEST_CASE_TEMPLATE("J: one logical backward over several backward calls, inside backward_scope", B, BOUNDARIES) {
  fixture<B> fx;
  check_steps(fx, 4, [](auto& f, int k) {
    tensor h, z, hd;
    {
      auto ac = f.m.autocast();
      h = f.run(0, f.input(k));
      hd = leaf(h->data, true);  // a pipeline stage boundary
      z = f.seq(1, 2)(hd);
    }
    auto scope = f.m.backward_scope();
    f.e.backward(f.e.loss(z));
    f.e.backward(h, hd->grad);
  }, /*scoped=*/true);
}

TEST_CASE_TEMPLATE("J': deferred weight gradients run inside the scope, before the update", B, BOUNDARIES) {
  fixture<B> fx;
  for (auto& l : fx.layers) l->delay_wgrad = true;
  check_steps(fx, 4, [](auto& f, int k) {
    tensor y;
    {
      auto ac = f.m.autocast();
      y = f.seq(0, 2)(f.input(k));
    }
    auto scope = f.m.backward_scope();
    f.e.backward(f.e.loss(y));
    CHECK(f.m.deferred_weight_grads() == 3);
    CHECK(f.L(0).dw[0] == 0.0f);
    const auto before = f.m.stats().backward_updates;
    f.m.run_deferred_weight_grads();
    CHECK(f.m.stats().backward_updates == before);  // the scope is still open: no update yet
    CHECK(f.m.deferred_weight_grads() == 0);
    bool any = false;
    for (float v : f.L(0).dw) any = any || v != 0.0f;
    CHECK(any);
  }, /*scoped=*/true);
}

TEST_CASE_TEMPLATE("K: an eval-mode module inside a checkpoint replays like a training one", B, BOUNDARIES) {
  for (bool reentrant : {true, false}) {
    CAPTURE(reentrant);
    fixture<B> fx(1);
    fx.L(0).training = false;
    check_steps(fx, 4, [reentrant](auto& f, int k) {
      auto body = [&f](const tensor& v) { return f.run(0, f.e.scale(v, 2.0f)); };
      tensor y;
      {
        auto ac = f.m.autocast();
        y = reentrant ? f.e.checkpoint_reentrant(body, f.input(k)) : f.e.checkpoint_nonreentrant(body, f.input(k));
      }
      f.backward(f.e.loss(y));
    });
  }
}

TEST_CASE_TEMPLATE("L: checkpoints under no_grad take no snapshot and update nothing", B, BOUNDARIES) {
  fixture<B> fx;
  for (int k = 0; k < 3; ++k) {
    auto ng = fx.m.grad_mode(false);
    auto ac = fx.m.autocast();
    tensor y = fx.e.checkpoint_reentrant(fx.seq(0, 2), fx.input(k));
    tensor z = fx.e.checkpoint_nonreentrant(fx.seq(0, 2), fx.input(k));
    CHECK_FALSE(y->requires_grad);
    CHECK(fx.m.stats().outstanding_snapshots == 0);
  }
  const auto s = fx.m.stats();
  CHECK(s.forward_updates == 0);  // no forward update without gradients (TE)
  CHECK(s.backward_updates == 0);
  CHECK(s.outstanding_snapshots == 0);
  CHECK(s.checkpoint_depth == 0);
  CHECK(fx.m.staging_amax(fx.m.slot(fx.L(0).h, tequant::forward_role::input)) > 0.0f);  // kept for the next update
}

TEST_CASE_TEMPLATE("M: a checkpoint whose input needs no gradient takes no snapshot", B, BOUNDARIES) {
  fixture<B> fx;
  for (int k = 0; k < 3; ++k) {
    tensor y;
    {
      auto ac = fx.m.autocast();
      y = fx.e.checkpoint_reentrant(fx.seq(0, 2), fx.input(k, /*requires_grad=*/false));
      CHECK(fx.m.stats().outstanding_snapshots == 0);
    }
    CHECK_FALSE(y->requires_grad);
  }
  CHECK(fx.m.stats().forward_updates == 3);
  CHECK(fx.m.stats().outstanding_snapshots == 0);
}

TEST_CASE_TEMPLATE("N: an ineligible reentrant checkpoint inside a non-reentrant replay keeps the replay", B,
                   BOUNDARIES) {
  fixture<B> fx(3);
  check_steps(fx, 4, [](auto& f, int k) {
    auto body = [&f](const tensor& x) {
      tensor c = f.e.checkpoint_reentrant(f.seq(2, 2), leaf(vec(rows * hidden, 0.25f)), "ineligible");
      return f.e.add(f.seq(0, 1)(x), c);
    };
    tensor y;
    {
      auto ac = f.m.autocast();
      y = f.e.checkpoint_nonreentrant(body, f.input(k), "outer");
    }
    f.backward(f.e.loss(y));
  });
}

TEST_CASE_TEMPLATE("P: autocast opened inside the checkpointed function", B, BOUNDARIES) {
  // Non-reentrant: the original forward runs with gradients, so its inner autocast updates: (1,1).
  fixture<B> fx;
  auto body = [&fx](const tensor& x) {
    auto ac = fx.m.autocast();
    return fx.seq(0, 2)(x);
  };
  check_steps(fx, 4, [&body](auto& f, int k) { f.backward(f.e.loss(f.e.checkpoint_nonreentrant(body, f.input(k)))); });

  // Reentrant: the original forward runs under no_grad, so (as in TE) no forward update runs in the
  // step; the replay's autocast must not run one either. The replay still works and backward updates.
  fixture<B> fr;
  auto rbody = [&fr](const tensor& x) {
    auto ac = fr.m.autocast();
    return fr.seq(0, 2)(x);
  };
  for (int k = 0; k < 3; ++k) {
    fr.backward(fr.e.loss(fr.e.checkpoint_reentrant(rbody, fr.input(k))));
    if constexpr (fixture<B>::flush_at_next_entry) fr.m.flush_backward_update();
    const auto s = fr.m.stats();
    CHECK(s.forward_updates == 0);
    CHECK(s.backward_updates == static_cast<std::uint64_t>(k + 1));
    CHECK(s.outstanding_snapshots == 0);
  }
}

TEST_CASE_TEMPLATE("Q/R: checkpointed backward updates backward scales; a replay leaves live state alone", B,
                   BOUNDARIES) {
  fixture<B> fx;
  const auto go = fx.m.slot(fx.L(0).h, tequant::backward_role::grad_output);
  const float initial = fx.m.scale(go);
  for (int k = 0; k < 3; ++k) {
    tensor y;
    {
      auto ac = fx.m.autocast();
      y = fx.e.checkpoint_reentrant(fx.seq(0, 2), fx.input(k));
    }
    std::vector<float> fwd_scales;
    for (auto& l : fx.layers) fwd_scales.push_back(fx.m.scale(fx.m.slot(l->h, tequant::forward_role::input)));
    fx.backward(fx.e.loss(y));
    fx.m.flush_backward_update();
    for (std::size_t i = 0; i < fx.layers.size(); ++i) {
      const auto s = fx.m.slot(fx.layers[i]->h, tequant::forward_role::input);
      CHECK(fx.m.scale(s) == fwd_scales[i]);  // the replay neither restored stale scales nor changed them
      CHECK(fx.m.staging_amax(s) == 0.0f);   // and recorded no amax
    }
  }
  CHECK(fx.m.scale(go) != initial);  // Q: the backward scales did move
}

TEST_CASE_TEMPLATE("I: a backward that runs no quantized module still updates inside backward_scope", B, BOUNDARIES,
                   tequant::first_module_owner) {
  fixture<B> fx;
  const auto go = fx.m.slot(fx.L(0).h, tequant::backward_role::grad_output);
  check_steps(fx, 4, [](auto& f, int k) {
    {
      auto ac = f.m.autocast();
      (void)f.seq(0, 2)(f.input(k, /*requires_grad=*/false));  // this rank's modules see no backward
    }
    tensor w = leaf(vec(4, 1.0f), true);
    tensor y = f.e.scale(w, 3.0f);  // the rank's backward has no quantized module
    auto scope = f.m.backward_scope();
    f.e.backward(f.e.loss(y));
  }, /*scoped=*/true);
  CHECK(fx.m.scale(go) == 1.0f);  // nothing recorded, nothing committed: the update ran on zeros
}
