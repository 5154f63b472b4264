// SPDX-License-Identifier: Apache-2.0
// The GPT example's training loop, generic over tequant's policies (one translation unit per recipe
// instantiates it: train_*.cpp).
#pragma once
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <tequant/backend/host.hpp>
#include <tequant/boundary/autocast_entry.hpp>
#include <tequant/cast_cache.hpp>
#include <tequant/boundary/engine_callback.hpp>
#include <tequant/boundary/explicit_scope.hpp>
#include <tequant/boundary/first_module_owner.hpp>
#include <tequant/checkpoint/no_recompute.hpp>
#include <tequant/checkpoint/stacked_recompute.hpp>
#include <tequant/comm/single_process.hpp>
#include <tequant/manager.hpp>

#include "../engine/hooks.hpp"
#include "checksum.hpp"
#include "corpus.hpp"
#include "model.hpp"
#include "options.hpp"

namespace gpt {

constexpr std::uint32_t seed = 1234;
constexpr std::size_t validation_windows = 16;

struct slot_trace {
  std::string name;  // "block0.qkv.input"
  int role = 0;      // 0 input, 1 weight, 2 grad_output
  std::vector<float> lo, hi;
};
struct run_result {
  std::vector<float> train_loss;                    // per step (mean over the micro-batches)
  std::vector<int> val_step;                        // steps after which the validation loss was measured
  std::vector<float> val_loss;
  std::vector<std::uint64_t> forward_updates, backward_updates;  // per step
  std::vector<slot_trace> scales;                   // FP8 only: per step, per linear and role
  bool stateful = false;                            // the recipe keeps scaling state (updates to count)
  std::string sample;                               // text generated at the end
  double seconds = 0.0, tokens_per_second = 0.0;
  std::uint64_t weight_casts = 0, weight_casts_reused = 0;  // through each linear's cast_cache
};

/// What a data-parallel run (gpt_mpi, ranks_main.cpp) adds to train(); the defaults are one process.
/// Every rank draws the same global batches of --batch sequences and keeps its contiguous share.
template <class Comm>
struct data_parallel {
  int rank = 0, ranks = 1;
  std::function<Comm()> make_comm = [] { return Comm{}; };  // the manager's comm policy
  /// This rank's micro-batch losses -> every rank's, rank after rank (for the global mean).
  std::function<std::vector<float>(const std::vector<float>&)> gather_losses;
  /// After the backward, before the optimizer: sums the ranks' gradients (each rank's loss already
  /// carries the 1/ranks of the global mean, so the sum is the global batch's gradient).
  std::function<void(const std::vector<tensor>& params)> sum_gradients;
  /// After each step: checksums of this rank's scaling state and of its weights.
  std::function<void(int step, std::uint64_t state, std::uint64_t weights)> after_step;
  int extra_module_at_step = 0;  // --debug-diverge: register one more module at this step (1-based)
};

/// Windows [rank, rank + 1) * B/ranks of a batch of B windows (B % ranks == 0).
inline corpus::batch_ids shard(corpus::batch_ids b, int rank, int ranks) {
  if (ranks == 1) return b;
  const std::size_t n = b.x.size() / std::size_t(ranks), at = n * std::size_t(rank);
  corpus::batch_ids s;
  s.x.assign(b.x.begin() + std::ptrdiff_t(at), b.x.begin() + std::ptrdiff_t(at + n));
  s.y.assign(b.y.begin() + std::ptrdiff_t(at), b.y.begin() + std::ptrdiff_t(at + n));
  return s;
}

template <class Boundary>
Boundary make_boundary(engine& e) {
  if constexpr (requires { typename Boundary::hooks_type; })
    return Boundary{mini::hooks{&e}};
  else
    return Boundary{};
}

/// Mean validation loss over fixed windows: a forward without gradients (FP8 when `fp8`).
template <class Manager>
float validation_loss(engine& e, Manager& m, model<Manager>& net, const corpus::batch_ids& v, std::size_t T, bool fp8) {
  auto no_grad = e.grad_mode(false);
  auto no_grad_m = m.grad_mode(false);
  auto region = m.autocast(fp8);  // gradients off: no forward update at its exit
  return mini::cross_entropy(e, net(e, v.x, T), v.y)->value.data[0];
}

/// Characters sampled from the model (temperature 0.8), starting from the validation text. The model
/// always sees a full window of T characters, repeated so that the rows fill whole 32-row blocks
/// (MXFP8 casts need that); only the first copy's last row is read.
template <class Manager>
std::string sample_text(engine& e, Manager& m, model<Manager>& net, const corpus& c, std::size_t T, int n, bool fp8) {
  std::mt19937 rng(seed + 7);
  const std::size_t copies = 32 / std::gcd(T, std::size_t(32));
  std::vector<std::uint32_t> ctx(c.validation_ids().begin(), c.validation_ids().begin() + std::ptrdiff_t(T));
  std::string out;
  auto no_grad = e.grad_mode(false);
  auto no_grad_m = m.grad_mode(false);
  for (int i = 0; i < n; ++i) {
    std::vector<std::uint32_t> ids;
    for (std::size_t k = 0; k < copies; ++k) ids.insert(ids.end(), ctx.begin(), ctx.end());
    matrix logits;
    {
      auto region = m.autocast(fp8);
      logits = net(e, ids, T)->value;
    }
    const std::size_t v = logits.cols, last = (T - 1) * v;
    std::vector<double> p(v);
    float mx = logits.data[last];
    for (std::size_t j = 0; j < v; ++j) mx = std::max(mx, logits.data[last + j]);
    for (std::size_t j = 0; j < v; ++j) p[j] = std::exp((logits.data[last + j] - mx) / 0.8);
    const auto id = static_cast<std::uint32_t>(std::discrete_distribution<std::size_t>(p.begin(), p.end())(rng));
    ctx.erase(ctx.begin());
    ctx.push_back(id);
    out.push_back(c.to_char(id));
  }
  return out;
}

/// Trains one model for o.steps steps: quantized when `fp8`, plain FP32 otherwise (the same code;
/// the autocast region is simply disabled).
template <class Recipe, class Boundary, class Checkpoint, class Comm = tequant::single_process>
run_result train(const options& o, const corpus& data, bool fp8, const data_parallel<Comm>& dp = {}) {
  // example-begin gpt_manager
  using manager_type = tequant::quantization_manager<Recipe, Boundary, Checkpoint, Comm>;
  engine e;
  // The recipe's default parameters; the comm reduces amaxes across ranks (single_process: nothing to do).
  manager_type m({}, make_boundary<Boundary>(e), dp.make_comm());
  // example-end
  const std::size_t T = std::size_t(o.context), B = std::size_t(o.batch);
  const int ranks = dp.ranks;
  std::mt19937 init_rng(seed + 1), batch_rng(seed + 2);
  model<manager_type> net(m, {data.vocab(), std::size_t(o.layers), std::size_t(o.d_model), std::size_t(o.heads), T},
                          o.rc, init_rng);
  adam opt(net.parameters(), o.lr, o.steps);
  // example-begin gpt_cast_cache
  // The weights change only in opt.step(): one key per optimizer step lets every micro-batch and every
  // checkpoint replay of a step reuse the step's first cast of each weight.
  typename tequant::cast_cache<typename manager_type::backend_type>::key weight_key{};
  if (o.cast_cache)
    for (auto* l : net.linears()) l->weight_key = &weight_key;
  // example-end
  if (o.identity_casts)
    for (auto* l : net.linears()) l->identity_casts = true;  // bookkeeping on, values FP32
  const corpus::batch_ids val = data.validation_batch(validation_windows, T);
  const int eval_every = o.eval_every > 0 ? o.eval_every : std::max(1, o.steps / 10);
  // Several micro-batches are one logical backward: a backward_scope makes them one update. A
  // single backward needs no scope under the boundaries that find its end themselves.
  const bool scoped = std::is_same_v<Boundary, tequant::explicit_scope> || o.micro_batches > 1;

  run_result r;
  r.stateful = manager_type::is_stateful;
  std::vector<std::uint64_t> fwd_at{0}, bwd_at;  // counters before each step's forward / backward
  const auto t0 = std::chrono::steady_clock::now();
  auto last_print = t0;
  for (int step = 0; step < o.steps; ++step) {
    if (step + 1 == dp.extra_module_at_step) (void)m.register_module("debug_diverge.rank" + std::to_string(dp.rank));
    // example-begin gpt_step
    std::vector<tensor> losses;
    {
      auto region = m.autocast(/*enabled=*/fp8);  // one forward update when the region exits
      for (int mb = 0; mb < o.micro_batches; ++mb) {
        const corpus::batch_ids b = shard(data.train_batch(batch_rng, B, T), dp.rank, ranks);
        losses.push_back(mini::cross_entropy(e, net(e, b.x, T), b.y));
      }
    }
    bwd_at.push_back(m.stats().backward_updates);
    const matrix seed_grad(1, 1, 1.0f / float(o.micro_batches * ranks));  // the mean over micro-batches
    if (scoped) {
      auto scope = m.backward_scope();  // every micro-batch's backward is one logical backward
      for (const tensor& loss : losses) e.backward(loss, seed_grad);
    } else {
      e.backward(losses[0], seed_grad);  // engine_callback: a callback at the end of this task flushes
    }
    if (dp.sum_gradients) dp.sum_gradients(net.parameters());
    opt.step();
    ++weight_key.step;  // new weights: the cached casts are stale
    // example-end
    fwd_at.push_back(m.stats().forward_updates);
    std::vector<float> mb_loss;
    for (const tensor& loss : losses) mb_loss.push_back(loss->value.data[0]);
    if (dp.gather_losses) mb_loss = dp.gather_losses(mb_loss);  // rank after rank
    float mean = 0.0f;  // in the order one process with micro-batches * ranks micro-batches sums them
    for (int mb = 0; mb < o.micro_batches; ++mb)
      for (int k = 0; k < ranks; ++k) mean += mb_loss[std::size_t(k * o.micro_batches + mb)] / float(o.micro_batches * ranks);
    r.train_loss.push_back(mean);
    if (dp.after_step) dp.after_step(step + 1, state_checksum(m), weights_checksum(net.parameters()));
    if (fp8) {
      auto lin = net.linears();
      if (r.scales.empty())
        for (auto* l : lin)
          for (int k = 0; k < 3; ++k)
            r.scales.push_back({l->name() + (k == 0 ? ".input" : k == 1 ? ".weight" : ".grad_output"), k, {}, {}});
      std::size_t i = 0;
      for (auto* l : lin)
        for (auto& seen : l->seen) {
          r.scales[i].lo.push_back(seen.lo);
          r.scales[i++].hi.push_back(seen.hi);
          seen = {};
        }
    }
    if ((step + 1) % eval_every == 0 || step + 1 == o.steps) {
      r.val_step.push_back(step + 1);
      r.val_loss.push_back(validation_loss(e, m, net, val, T, fp8));
    }
    const auto now = std::chrono::steady_clock::now();
    const double dt = std::chrono::duration<double>(now - t0).count();
    const bool due = o.tty ? std::chrono::duration<double>(now - last_print).count() > 0.2
                           : (step + 1) % std::max(1, o.steps / 10) == 0;
    if (!o.quiet && (due || step + 1 == o.steps)) {
      const double tps = double(step + 1) * double(o.micro_batches * B * T) / dt;
      const double eta = dt / double(step + 1) * double(o.steps - step - 1);
      std::printf(o.tty ? "\r  %-4s step %5d/%d  train %.4f  val %.4f (step %d)  %7.0f tok/s  ETA %4.0fs "
                        : "  %-4s step %5d/%d  train %.4f  val %.4f (step %d)  %7.0f tok/s  ETA %4.0fs\n",
                  !fp8 ? "fp32" : o.identity_casts ? "id" : "fp8", step + 1, o.steps, double(mean), double(r.val_loss.empty() ? NAN : r.val_loss.back()),
                  r.val_step.empty() ? 0 : r.val_step.back(), tps, eta);
      std::fflush(stdout);
      last_print = now;
    }
  }
  if (!o.quiet && o.tty) std::printf("\n");
  // autocast_entry flushes a step's update at the next top-level entry; after the last step, flush.
  m.flush_backward_update();
  bwd_at.push_back(m.stats().backward_updates);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_per_second = double(o.steps) * double(o.micro_batches * B * T) / r.seconds;
  for (int k = 0; k < o.steps; ++k) {
    r.forward_updates.push_back(fwd_at[k + 1] - fwd_at[k]);
    r.backward_updates.push_back(bwd_at[k + 1] - bwd_at[k]);
  }
  for (auto* l : net.linears()) {
    r.weight_casts += l->weight_cache.casts();
    r.weight_casts_reused += l->weight_cache.reuses();
  }
  if (o.sample_chars > 0) r.sample = sample_text(e, m, net, data, T, o.sample_chars, fp8);
  return r;
}

/// Runs train<Recipe, ...> with the boundary and checkpoint policies the options name.
template <class Recipe, class Comm = tequant::single_process>
run_result train_with(const options& o, const corpus& data, bool fp8, const data_parallel<Comm>& dp = {}) {
  auto with_checkpoint = [&]<class Boundary>() {
    if (o.rc == recompute::none) return train<Recipe, Boundary, tequant::no_recompute, Comm>(o, data, fp8, dp);
    return train<Recipe, Boundary, tequant::stacked_recompute, Comm>(o, data, fp8, dp);
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
run_result train_delayed(const options& o, const corpus& data, bool fp8);
run_result train_current(const options& o, const corpus& data, bool fp8);
run_result train_mxfp8(const options& o, const corpus& data, bool fp8);
run_result train_block(const options& o, const corpus& data, bool fp8);
run_result train_nvfp4(const options& o, const corpus& data, bool fp8);

}  // namespace gpt
