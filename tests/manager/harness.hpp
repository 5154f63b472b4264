// SPDX-License-Identifier: Apache-2.0
// Test fixture: one manager per boundary policy, the test engine, a few FP8 linears, and per-step checks.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/boundary/first_module_owner.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"
#include "test_engine.hpp"

namespace tq_test {

using callback_boundary = tequant::engine_callback<full_test_hooks>;

template <class Boundary>
Boundary make_boundary(task_stack& ts) {
  if constexpr (requires { typename Boundary::hooks_type; }) {  // engine_callback with any test hooks
    typename Boundary::hooks_type h{};
    h.ts = &ts;
    return Boundary{h};
  } else {
    return Boundary{};
  }
}

inline tequant::delayed_params small_params() {
  tequant::delayed_params p;
  p.history_length = 4;
  return p;
}

constexpr std::size_t hidden = 8, rows = 4;

template <class Boundary, class Recipe = tequant::delayed_scaling<>>
struct fixture {
  using manager = tequant::quantization_manager<Recipe, Boundary>;
  using linear = fp8_linear<manager>;
  static constexpr bool flush_at_next_entry = std::is_same_v<Boundary, tequant::autocast_entry>;
  static constexpr bool needs_scope = std::is_same_v<Boundary, tequant::explicit_scope>;

  task_stack ts;
  manager m;
  engine<manager> e;
  std::vector<std::unique_ptr<linear>> layers;

  explicit fixture(int n_layers = 3, typename manager::params_type p = default_params())
      : m(p, make_boundary<Boundary>(ts)), e(m, ts) {
    for (int i = 0; i < n_layers; ++i)
      layers.push_back(std::make_unique<linear>(m, "L" + std::to_string(i + 1), hidden, hidden, 0.5f + 0.25f * i));
  }
  static typename manager::params_type default_params() {
    if constexpr (std::is_same_v<Recipe, tequant::delayed_scaling<>>)
      return small_params();
    else
      return {};
  }

  linear& L(int i) { return *layers.at(static_cast<std::size_t>(i)); }
  tensor run(int i, const tensor& x) { return L(i)(e, x); }
  /// L(first) ... L(last) in sequence.
  std::function<tensor(const tensor&)> seq(int first, int last) {
    return [this, first, last](const tensor& x) {
      tensor h = x;
      for (int i = first; i <= last; ++i) h = run(i, h);
      return h;
    };
  }

  /// Deterministic input of step k.
  static tensor input(int k, bool requires_grad = true) {
    vec x(rows * hidden);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = static_cast<float>(static_cast<int>((i * 5 + static_cast<std::size_t>(k) * 3) % 13) - 6) * 0.37f;
    return leaf(std::move(x), requires_grad);
  }

  /// The logical backward of a step the way each boundary is meant to be used.
  void backward(const tensor& loss) {
    if constexpr (needs_scope) {
      auto s = m.backward_scope();
      e.backward(loss);
    } else {
      e.backward(loss);
    }
  }

  void sgd() {
    for (auto& l : layers) l->sgd(0.01f);
  }
};

/// Runs `steps` steps and checks, per step, one forward and one backward update (the backward update
/// of autocast_entry arrives at the next step's entry), nothing pending after the boundary, depths 0
/// and no outstanding snapshot. `scoped`: the step wraps its backward in its own backward_scope(),
/// which flushes at its exit under every boundary.
template <class F, class Step>
void check_steps(F& fx, int steps, Step step, bool scoped = false) {
  for (int k = 0; k < steps; ++k) {
    CAPTURE(k);
    const auto before = fx.m.stats();
    step(fx, k);
    fx.sgd();
    const auto after = fx.m.stats();
    CHECK(after.forward_updates - before.forward_updates == 1);
    if (F::flush_at_next_entry && !scoped) {
      CHECK(after.backward_updates - before.backward_updates == (k == 0 ? 0u : 1u));
      CHECK(after.pending);
    } else {
      CHECK(after.backward_updates - before.backward_updates == 1);
      CHECK_FALSE(after.pending);
    }
    CHECK(after.autocast_depth == 0);
    CHECK(after.scope_depth == 0);
    CHECK(after.checkpoint_depth == 0);
    CHECK(after.outstanding_snapshots == 0);
  }
}

/// Sum of the staging amaxes of every backward slot (0 after a complete backward update).
template <class M>
float backward_staging(const M& m) {
  float s = 0.0f;
  for (std::uint32_t b = 0; b < m.bucket_count(); ++b) {
    const auto& info = m.bucket(b);
    if (info.dir != tequant::direction::backward) continue;
    for (std::uint32_t j = 0; j < info.slots; ++j) s += m.staging_amax({info.dir, b, j});
  }
  return s;
}

/// Every scale, staging amax and history value of the manager, in TE's [L, n] layout per bucket.
template <class M>
std::vector<float> full_state(M& m) {
  std::vector<float> out;
  for (std::uint32_t b = 0; b < m.bucket_count(); ++b) {
    auto& st = m.recipe_state()[b];
    const std::uint32_t n = st.size(), L = st.history_length();
    std::vector<float> h(static_cast<std::size_t>(n) * L);
    st.export_te_history(0, n, std::span<float>(h));
    out.insert(out.end(), h.begin(), h.end());
    for (std::uint32_t j = 0; j < n; ++j) out.push_back(st.scale(j));
  }
  return out;
}

}  // namespace tq_test
