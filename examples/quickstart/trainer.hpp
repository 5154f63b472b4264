// SPDX-License-Identifier: Apache-2.0
// The main example's model, data and training loop, generic over tequant's policies.
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <tequant/boundary/autocast_entry.hpp>
#include <tequant/boundary/engine_callback.hpp>
#include <tequant/boundary/explicit_scope.hpp>
#include <tequant/boundary/first_module_owner.hpp>
#include <tequant/checkpoint/no_recompute.hpp>
#include <tequant/checkpoint/stacked_recompute.hpp>
#include <tequant/backend/host.hpp>
#include <tequant/manager.hpp>
#include <tequant/recipe/delayed.hpp>

#include "../engine/autograd.hpp"
#include "../engine/checkpoint.hpp"
#include "../engine/fp8_linear.hpp"
#include "../engine/hooks.hpp"
#include "../engine/ops.hpp"
#include "options.hpp"

namespace quickstart {

using mini::engine;
using mini::matrix;
using mini::tensor;

constexpr std::size_t batch = 64, d_in = 32, width = 64, hidden = 128, d_out = 32, n_blocks = 2;
constexpr std::uint32_t seed = 1234;

/// What one run (FP32 or FP8) produced.
struct slot_trace {
  std::string name;
  bool backward = false;
  std::vector<float> lo, hi;  // per step: smallest and largest scale the slot's casts used
};
struct run_result {
  std::vector<float> loss;                               // per step
  std::vector<std::uint64_t> forward_updates, backward_updates;  // per step
  std::vector<slot_trace> scales;                        // FP8 only
  std::size_t engine_callbacks = 0;                      // final callbacks queued on the engine
  double seconds = 0.0;
};

/// The synthetic task: regress the output of a fixed random "teacher" network (tanh MLP) from
/// Gaussian inputs, plus a little label noise. Every run sees the same batches.
class teacher {
 public:
  teacher() : rng_(seed), w1_(d_in, width), w2_(width, d_out) {
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (float& v : w1_.data) v = n(rng_) / std::sqrt(float(d_in)) * 1.5f;
    for (float& v : w2_.data) v = n(rng_) / std::sqrt(float(width));
  }
  struct sample {
    matrix x, y;
  };
  sample next() {
    std::normal_distribution<float> n(0.0f, 1.0f);
    sample s{matrix(batch, d_in), {}};
    for (float& v : s.x.data) v = n(rng_);
    matrix h = mini::gemm(s.x, w1_);
    for (float& v : h.data) v = std::tanh(v);
    s.y = mini::gemm(h, w2_);
    for (float& v : s.y.data) v += 0.05f * n(rng_);
    return s;
  }

 private:
  std::mt19937 rng_;
  matrix w1_, w2_;
};

// example-begin model
/// x -> in_proj -> [h + fc2(gelu(fc1(h)))] x n_blocks -> out_proj. The residual branches are
/// recomputed in backward (reentrant checkpoints); `nested` also checkpoints the whole trunk, so the
/// branch checkpoints replay inside the trunk's replay.
template <class Manager>
struct model {
  using linear = mini::fp8_linear<Manager>;
  Manager& m;
  recompute rc;
  std::unique_ptr<linear> in_proj, out_proj;
  std::vector<std::unique_ptr<linear>> fc1, fc2;

  model(Manager& mgr, recompute r, std::mt19937& rng) : m(mgr), rc(r) {
    in_proj = std::make_unique<linear>(m, "in_proj", d_in, width, rng);
    for (std::size_t b = 0; b < n_blocks; ++b) {
      fc1.push_back(std::make_unique<linear>(m, "block" + std::to_string(b) + ".fc1", width, hidden, rng));
      fc2.push_back(std::make_unique<linear>(m, "block" + std::to_string(b) + ".fc2", hidden, width, rng));
    }
    out_proj = std::make_unique<linear>(m, "out_proj", width, d_out, rng);
  }

  tensor operator()(engine& e, const tensor& x) {
    auto trunk = [this, &e](const tensor& t) {
      tensor h = t;
      for (std::size_t b = 0; b < n_blocks; ++b) {
        auto branch = [this, &e, b](const tensor& u) { return (*fc2[b])(e, mini::gelu(e, (*fc1[b])(e, u))); };
        h = mini::add(e, h, recomputed(e, branch, h, "block" + std::to_string(b)));
      }
      return h;
    };
    tensor h = (*in_proj)(e, x);
    h = rc == recompute::nested ? recomputed(e, trunk, h, "trunk") : trunk(h);
    return (*out_proj)(e, h);
  }

  template <class F>
  tensor recomputed(engine& e, F&& fn, const tensor& x, std::string name) {
    if constexpr (Manager::supports_recompute) {
      if (rc != recompute::none) return mini::checkpoint(e, m, fn, x, std::move(name));
    }
    return fn(x);
  }
  // example-end

  std::vector<linear*> layers() {
    std::vector<linear*> r{in_proj.get()};
    for (std::size_t b = 0; b < n_blocks; ++b) {
      r.push_back(fc1[b].get());
      r.push_back(fc2[b].get());
    }
    r.push_back(out_proj.get());
    return r;
  }
};

/// Adam on the layers' weights.
template <class Linear>
class adam {
 public:
  adam(std::vector<Linear*> layers, float lr, int total_steps)
      : layers_(std::move(layers)), lr_(lr), total_(total_steps) {
    for (auto* l : layers_) {
      m_.emplace_back(l->weight->value.size(), 0.0f);
      v_.emplace_back(l->weight->value.size(), 0.0f);
    }
  }
  void step() {
    ++t_;
    const float c1 = 1.0f - std::pow(0.9f, float(t_)), c2 = 1.0f - std::pow(0.999f, float(t_));
    // Cosine decay to zero: the last steps are quiet, so "final loss" compares converged models.
    const float lr = lr_ * 0.5f * (1.0f + std::cos(3.14159265f * float(t_ - 1) / float(total_)));
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      auto& w = layers_[i]->weight;
      if (w->grad.empty()) continue;
      for (std::size_t j = 0; j < w->value.size(); ++j) {
        const float g = w->grad.data[j];
        m_[i][j] = 0.9f * m_[i][j] + 0.1f * g;
        v_[i][j] = 0.999f * v_[i][j] + 0.001f * g * g;
        w->value.data[j] -= lr * (m_[i][j] / c1) / (std::sqrt(v_[i][j] / c2) + 1e-8f);
      }
      w->grad = {};
    }
  }

 private:
  std::vector<Linear*> layers_;
  float lr_;
  int total_;
  std::vector<std::vector<float>> m_, v_;
  int t_ = 0;
};

/// The recipe's knobs for this example: its defaults, unless a train_*.cpp specializes this.
template <class Recipe>
typename Recipe::params_type recipe_params() {
  return typename Recipe::params_type{};
}

template <class Boundary>
Boundary make_boundary(engine& e) {
  if constexpr (requires { typename Boundary::hooks_type; })
    return Boundary{mini::hooks{&e}};
  else
    return Boundary{};
}

/// Trains one model for o.steps steps; quantized when `fp8`, plain FP32 otherwise (same code, the
/// autocast region is simply disabled).
template <class Recipe, class Boundary, class Checkpoint>
run_result train(const options& o, bool fp8) {
  // example-begin make_manager
  // e.g. Recipe = delayed_scaling<>, Boundary = engine_callback<mini::hooks>, Checkpoint = stacked_recompute
  using manager_type = tequant::quantization_manager<Recipe, Boundary, Checkpoint>;
  engine e;
  manager_type m(recipe_params<Recipe>(), make_boundary<Boundary>(e));  // hooks{&e} for engine_callback
  // example-end
  std::mt19937 init_rng(seed + 1);
  model<manager_type> net(m, o.rc, init_rng);
  adam<typename model<manager_type>::linear> opt(net.layers(), 3e-3f, o.steps);
  teacher data;

  run_result r;
  std::vector<std::uint64_t> fwd_at{0}, bwd_at;  // counters before each step's forward / backward
  const auto t0 = std::chrono::steady_clock::now();
  auto last_print = t0;
  for (int step = 0; step < o.steps; ++step) {
    const auto s = data.next();
    // example-begin training_step
    tensor loss;
    {
      auto region = m.autocast(/*enabled=*/fp8);  // forward update when the region exits
      loss = mini::mse_loss(e, net(e, mini::leaf(s.x)), s.y);
    }
    bwd_at.push_back(m.stats().backward_updates);  // (for the report: updates per step)
    if constexpr (std::is_same_v<Boundary, tequant::explicit_scope>) {
      auto scope = m.backward_scope();  // the scope is the logical backward: one flush at its exit
      e.backward(loss);
    } else {
      e.backward(loss);  // engine_callback: a callback at the end of this task flushes once
    }
    opt.step();
    // example-end
    fwd_at.push_back(m.stats().forward_updates);
    r.loss.push_back(loss->value.data[0]);
    if (fp8) {
      if (r.scales.empty())
        for (auto* l : net.layers())
          for (int k = 0; k < 3; ++k)
            r.scales.push_back({l->name() + (k == 0 ? ".input" : k == 1 ? ".weight" : ".grad_output"), k == 2, {}, {}});
      std::size_t i = 0;
      for (auto* l : net.layers())
        for (auto& seen : l->seen) {
          r.scales[i].lo.push_back(seen.lo);
          r.scales[i++].hi.push_back(seen.hi);
          seen = {};
        }
    }
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - t0).count();
    // A terminal gets one progress line rewritten in place; a log gets a line every 10% of the steps.
    const bool due = o.tty ? std::chrono::duration<double>(now - last_print).count() > 0.2
                           : (step + 1) % std::max(1, o.steps / 10) == 0;
    if (!o.quiet && (due || step + 1 == o.steps)) {
      std::printf(o.tty ? "\r  %-4s step %5d/%d  loss %.5f  %6.1f steps/s" : "  %-4s step %5d/%d  loss %.5f  %6.1f steps/s\n",
                  fp8 ? "fp8" : "fp32", step + 1, o.steps, double(r.loss.back()), (step + 1) / dt);
      std::fflush(stdout);
      last_print = now;
    }
  }
  if (!o.quiet && o.tty) std::printf("\n");
  // autocast_entry flushes the last step's update at the next step's entry; there is none, so flush.
  m.flush_backward_update();
  bwd_at.push_back(m.stats().backward_updates);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Updates of step k: forward ones between the starts of step k and k+1; backward ones between the
  // starts of step k's and step k+1's backward (a deferred flush belongs to the step it finishes).
  for (int k = 0; k < o.steps; ++k) {
    r.forward_updates.push_back(fwd_at[k + 1] - fwd_at[k]);
    r.backward_updates.push_back(bwd_at[k + 1] - bwd_at[k]);
  }
  r.engine_callbacks = e.callbacks_queued();
  return r;
}

/// Runs train<Recipe, ...> with the boundary and checkpoint policies the options name.
template <class Recipe>
run_result train_with(const options& o, bool fp8) {
  auto with_checkpoint = [&]<class Boundary>() {
    if (o.rc == recompute::none) return train<Recipe, Boundary, tequant::no_recompute>(o, fp8);
    return train<Recipe, Boundary, tequant::stacked_recompute>(o, fp8);
  };
  switch (o.bnd) {
    case boundary::engine: return with_checkpoint.template operator()<tequant::engine_callback<mini::hooks>>();
    case boundary::autocast: return with_checkpoint.template operator()<tequant::autocast_entry>();
    case boundary::scope: return with_checkpoint.template operator()<tequant::explicit_scope>();
    case boundary::first_module: return with_checkpoint.template operator()<tequant::first_module_owner>();
  }
  return {};
}

// One translation unit per recipe (train_*.cpp) keeps the build parallel and small.
run_result train_delayed(const options& o, bool fp8);
run_result train_current(const options& o, bool fp8);
run_result train_mxfp8(const options& o, bool fp8);
run_result train_nvfp4(const options& o, bool fp8);
run_result train_block(const options& o, bool fp8);

}  // namespace quickstart
