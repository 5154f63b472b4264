// SPDX-License-Identifier: Apache-2.0
// "Exactly once", proved for every small graph rather than sampled: every shape of up to
// TEQUANT_SHAPE_NODES nodes (containers counted) nested up to depth 3, built from
//   P  a quantized linear              D  a quantized linear whose wgrad is deferred (backward_dw)
//   T  a quantized linear whose backward raises in the first step
//   R  a reentrant checkpoint          S  a non-reentrant (same-task) checkpoint
//   N  a nested backward task that is not a replay (a node whose backward runs backward() on a
//      sub-graph built in its forward)
// trained for two steps under engine_callback (full hooks), autocast_entry and explicit_scope. Each
// logical backward flushes at most once (explicit_scope: exactly once), and the three boundaries end
// with bit-identical losses, scales and histories: a second flush inside one backward, a lost update or
// one merged into the next step would each change the histories of some shape.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../manager/harness.hpp"
#include "tequant/format/bits.hpp"

#ifndef TEQUANT_SHAPE_NODES
#define TEQUANT_SHAPE_NODES 5
#endif

namespace {

using namespace tq_test;

enum class kind : char { P = 'P', D = 'D', T = 'T', R = 'R', S = 'S', N = 'N' };

struct item {
  kind k;
  std::vector<item> children;
  int layer = -1;  // leaves: the linear they run
};
using shape = std::vector<item>;

bool is_leaf(kind k) { return k == kind::P || k == kind::D || k == kind::T; }

// ---- enumeration: every sequence of trees with exactly n nodes, containers non-empty -----------------

std::vector<shape> sequences(int n, int depth);

std::vector<item> trees(int n, int depth) {
  std::vector<item> out;
  if (n == 1)
    for (kind k : {kind::P, kind::D, kind::T}) out.push_back({k, {}});
  if (n >= 2 && depth > 1)
    for (kind k : {kind::R, kind::S, kind::N})
      for (auto& ch : sequences(n - 1, depth - 1)) out.push_back({k, std::move(ch)});
  return out;
}

std::vector<shape> sequences(int n, int depth) {
  if (n == 0) return {shape{}};
  std::vector<shape> out;
  for (int first = 1; first <= n; ++first)
    for (const item& t : trees(first, depth))
      for (auto& rest : sequences(n - first, depth)) {
        shape s{t};
        s.insert(s.end(), rest.begin(), rest.end());
        out.push_back(std::move(s));
      }
  return out;
}

std::string describe(const shape& s) {
  std::string r;
  for (const item& i : s) {
    r += static_cast<char>(i.k);
    if (!i.children.empty()) r += "(" + describe(i.children) + ")";
  }
  return r;
}

int number_leaves(shape& s, int next = 0) {
  for (item& i : s) {
    if (is_leaf(i.k)) i.layer = next++;
    else next = number_leaves(i.children, next);
  }
  return next;
}

bool contains(const shape& s, kind k) {
  for (const item& i : s)
    if (i.k == k || contains(i.children, k)) return true;
  return false;
}

void mark_layers(const shape& s, std::vector<kind>& kinds) {
  for (const item& i : s) {
    if (is_leaf(i.k)) kinds[static_cast<std::size_t>(i.layer)] = i.k;
    else mark_layers(i.children, kinds);
  }
}

// ---- one run: two steps of the shape under one boundary ----------------------------------------------

struct outcome {
  std::vector<float> losses, state;
  std::uint64_t backward_updates = 0;
  bool pending_left = false;
};

template <class Boundary>
struct runner {
  fixture<Boundary> fx;
  std::vector<kind> kinds;

  explicit runner(const shape& s, int leaves) : fx(leaves), kinds(static_cast<std::size_t>(leaves), kind::P) {
    mark_layers(s, kinds);
    for (std::size_t i = 0; i < kinds.size(); ++i) fx.layers[i]->delay_wgrad = kinds[i] == kind::D;
  }

  tensor apply(const shape& s, tensor x) {
    for (const item& i : s) x = apply(i, x);
    return x;
  }
  tensor apply(const item& i, const tensor& x) {
    switch (i.k) {
      case kind::P:
      case kind::D:
      case kind::T: return fx.run(i.layer, x);
      case kind::R: {
        const shape ch = i.children;
        return fx.e.checkpoint_reentrant([this, ch](const tensor& t) { return apply(ch, t); }, x);
      }
      case kind::S: {
        const shape ch = i.children;
        return fx.e.checkpoint_nonreentrant([this, ch](const tensor& t) { return apply(ch, t); }, x);
      }
      case kind::N: {
        tensor xs = leaf(x->data, true);
        tensor ys = apply(i.children, xs);
        return fx.e.make(ys->data, {x}, {}, [this, xs, ys](node&, const vec& g) {
          xs->grad.clear();
          fx.e.backward(ys, g);  // a nested task, not a replay
          return std::vector<vec>{xs->grad.empty() ? vec(g.size(), 0.0f) : xs->grad};
        }, "nested");
      }
    }
    return x;
  }

  outcome run(const shape& s) {
    const bool scoped = std::is_same_v<Boundary, tequant::explicit_scope> || contains(s, kind::D);
    outcome o;
    for (int step = 0; step < 2; ++step) {
      for (std::size_t i = 0; i < kinds.size(); ++i) fx.layers[i]->throw_in_backward = kinds[i] == kind::T && step == 0;
      tensor loss;
      {
        auto region = fx.m.autocast();
        loss = fx.e.loss(apply(s, fixture<Boundary>::input(step)));
      }
      o.losses.push_back(loss->data[0]);
      try {
        if (scoped) {
          auto scope = fx.m.backward_scope();
          fx.e.backward(loss);
          fx.m.run_deferred_weight_grads();
        } else {
          fx.e.backward(loss);
        }
      } catch (const std::runtime_error&) {
        REQUIRE(contains(s, kind::T));
      }
      REQUIRE(fx.m.deferred_weight_grads() == 0);
      REQUIRE(fx.ts.tasks.empty());
      fx.sgd();
    }
    fx.m.flush_backward_update();
    o.backward_updates = fx.m.stats().backward_updates;
    o.pending_left = fx.m.stats().pending;
    o.state = full_state(fx.m);
    return o;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (tequant::detail::float_bits(a[i]) != tequant::detail::float_bits(b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("every small graph shape: at most one backward update per logical backward, the same state under every fixed boundary") {
  std::size_t checked = 0, failures = 0;
  for (int n = 1; n <= TEQUANT_SHAPE_NODES; ++n)
    for (shape s : sequences(n, 3)) {
      const int leaves = number_leaves(s);
      const outcome cb = runner<callback_boundary>(s, leaves).run(s);
      const outcome ac = runner<tequant::autocast_entry>(s, leaves).run(s);
      const outcome sc = runner<tequant::explicit_scope>(s, leaves).run(s);
      const bool ok = sc.backward_updates == 2 && cb.backward_updates <= 2 && ac.backward_updates <= 2 &&
                      !cb.pending_left && !ac.pending_left && !sc.pending_left && same_bits(cb.losses, sc.losses) &&
                      same_bits(ac.losses, sc.losses) && same_bits(cb.state, sc.state) && same_bits(ac.state, sc.state);
      if (!ok && ++failures <= 10) {
        CAPTURE(describe(s));
        CAPTURE(cb.backward_updates);
        CAPTURE(ac.backward_updates);
        CAPTURE(sc.backward_updates);
        CHECK(same_bits(cb.state, sc.state));
        CHECK(same_bits(ac.state, sc.state));
        CHECK(same_bits(cb.losses, sc.losses));
        CHECK(sc.backward_updates == 2);
        CHECK(cb.backward_updates <= 2);
        CHECK(ac.backward_updates <= 2);
      }
      ++checked;
    }
  std::printf("graph shapes: %zu checked (up to %d nodes, depth 3, kinds PDTRSN), %zu failed\n", checked,
              TEQUANT_SHAPE_NODES, failures);
  CHECK(failures == 0);
  CHECK(checked > 1000);
}
