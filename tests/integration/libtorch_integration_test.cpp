// SPDX-License-Identifier: Apache-2.0
// The engine-callback boundary on libtorch's real autograd engine: TE's bug scenarios (te-semantics
// §7 A-G, J-O), plain versus checkpointed training bit for bit, and TE's old first-module ownership
// failing on the same graphs. One TU on purpose (each libtorch TU costs ~12 s and ~1 GB to compile).
// Keep libtorch.hpp the first include: this TU is also the check that the header compiles on its own.
#include "tequant/integration/libtorch.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "custom_policies/ema_current_scaling.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/boundary/first_module_owner.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/block.hpp"
#include "tequant/recipe/current.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/mxfp8.hpp"
#include "tequant/recipe/nvfp4.hpp"
#include "tequant/format/bits.hpp"

namespace {

using namespace tequant;
using vl = torch::autograd::variable_list;

using hooks_boundary = engine_callback<libtorch_hooks>;
template <class Boundary>
using delayed_mgr = quantization_manager<delayed_scaling<>, Boundary>;
using cb_mgr = delayed_mgr<hooks_boundary>;
using owner_mgr = delayed_mgr<first_module_owner>;

constexpr std::int64_t hidden = 32;
constexpr std::int64_t batch = 32;

template <class M>
M make_mgr() {
  return M(delayed_params{.format = fp8_format::hybrid, .history_length = 4});
}

template <class M>
using layer_ptr = std::shared_ptr<quantized_linear<M>>;

template <class M>
std::vector<layer_ptr<M>> make_layers(M& mgr, int n, const std::string& prefix = "L", std::uint64_t seed = 7) {
  torch::manual_seed(seed);
  std::vector<layer_ptr<M>> v;
  for (int i = 0; i < n; ++i)
    v.push_back(std::make_shared<quantized_linear<M>>(mgr, prefix + std::to_string(i), hidden, hidden));
  return v;
}

template <class M>
vl seq(const std::vector<layer_ptr<M>>& ls, std::size_t first, std::size_t last, const vl& in) {
  torch::Tensor x = in[0];
  for (std::size_t i = first; i < last; ++i) x = ls[i]->forward(x);
  return {x};
}

template <class M>
vl seq_all(const std::vector<layer_ptr<M>>& ls, const vl& in) {
  return seq(ls, 0, ls.size(), in);
}

torch::Tensor input(bool requires_grad = true, std::uint64_t seed = 11) {
  torch::manual_seed(seed);
  return torch::randn({batch, hidden}).requires_grad_(requires_grad);
}

struct counts {
  std::uint64_t forward, backward;
};

template <class M>
counts snapshot_counts(const M& mgr) {
  const auto s = mgr.stats();
  return {s.forward_updates, s.backward_updates};
}

/// One training step's worth of updates happened and nothing is left behind.
template <class M>
void check_step(const M& mgr, counts before, std::uint64_t fwd = 1, std::uint64_t bwd = 1) {
  const auto s = mgr.stats();
  CHECK(s.forward_updates - before.forward == fwd);
  CHECK(s.backward_updates - before.backward == bwd);
  CHECK_FALSE(s.pending);
  CHECK(s.autocast_depth == 0);
  CHECK(s.scope_depth == 0);
  CHECK(s.checkpoint_depth == 0);
  CHECK(s.outstanding_snapshots == 0);
}

template <class M, class Forward>
void run_steps(M& mgr, int steps, Forward&& forward, std::uint64_t fwd = 1, std::uint64_t bwd = 1) {
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    const counts before = snapshot_counts(mgr);
    torch::Tensor loss;
    {
      libtorch_autocast<M> region(mgr);
      loss = forward().sum();
    }
    loss.backward();
    check_step(mgr, before, fwd, bwd);
  }
}

// ---- the 3-layer MLP, plain or checkpointed --------------------------------------------------------

enum class ckpt { plain, reentrant, same_task, per_layer_reentrant, per_layer_same_task, nested, nested_mixed };

template <class M>
struct mlp {
  M& mgr;
  std::vector<layer_ptr<M>> layers;
  explicit mlp(M& m) : mgr(m), layers(make_layers(m, 3)) {}

  // dropout draws from the CPU generator: a replay must see the forward's random stream
  torch::Tensor block(std::size_t i, const torch::Tensor& x) const {
    torch::Tensor y = layers[i]->forward(x);
    return i + 1 < layers.size() ? torch::dropout(torch::relu(y), 0.25, true) : y;
  }
  vl blocks(std::size_t first, std::size_t last, const vl& in) const {
    torch::Tensor x = in[0];
    for (std::size_t i = first; i < last; ++i) x = block(i, x);
    return {x};
  }

  torch::Tensor forward(ckpt mode, const torch::Tensor& x) const {
    auto all = [this](const vl& v) { return blocks(0, 3, v); };
    auto one = [this](std::size_t i) { return [this, i](const vl& v) { return blocks(i, i + 1, v); }; };
    switch (mode) {
      case ckpt::plain: return blocks(0, 3, {x})[0];
      case ckpt::reentrant: return checkpoint(mgr, all, {x}, checkpoint_mode::reentrant, "all")[0];
      case ckpt::same_task: return checkpoint(mgr, all, {x}, checkpoint_mode::same_task, "all")[0];
      case ckpt::per_layer_reentrant:
      case ckpt::per_layer_same_task: {
        const auto m = mode == ckpt::per_layer_reentrant ? checkpoint_mode::reentrant : checkpoint_mode::same_task;
        vl v{x};
        for (std::size_t i = 0; i < 3; ++i) v = checkpoint(mgr, one(i), v, m, "layer" + std::to_string(i));
        return v[0];
      }
      case ckpt::nested:
      case ckpt::nested_mixed: {
        const auto outer = mode == ckpt::nested ? checkpoint_mode::reentrant : checkpoint_mode::same_task;
        auto body = [this, one](const vl& v) {
          vl h = checkpoint(mgr, one(0), v, checkpoint_mode::reentrant, "inner");
          return blocks(1, 3, h);
        };
        return checkpoint(mgr, body, {x}, outer, "outer")[0];
      }
    }
    return {};
  }
};

struct step_record {
  float loss;
  std::vector<torch::Tensor> grads;  // input, then every parameter
  std::vector<float> scales;         // every slot of every bucket
  std::vector<float> histories;      // TE's [L, n] layout of every bucket
  counts after;
};

template <class M>
std::vector<step_record> train(ckpt mode, int steps) {
  M mgr = make_mgr<M>();
  mlp<M> net(mgr);
  torch::manual_seed(1234);  // the dropout stream
  std::vector<step_record> out;
  for (int step = 0; step < steps; ++step) {
    torch::Tensor x = input(true, 100 + static_cast<std::uint64_t>(step));
    for (auto& l : net.layers) l->zero_grad();
    const counts before = snapshot_counts(mgr);
    torch::Tensor loss;
    {
      libtorch_autocast<M> region(mgr);
      loss = net.forward(mode, x).pow(2).mean();
    }
    loss.backward();
    check_step(mgr, before);
    step_record r;
    r.loss = loss.item<float>();
    r.grads.push_back(x.grad().clone());
    for (auto& l : net.layers) {
      r.grads.push_back(l->weight.grad().clone());
      r.grads.push_back(l->bias.grad().clone());
    }
    for (std::uint32_t b = 0; b < mgr.bucket_count(); ++b) {
      const auto& st = mgr.recipe_state()[b];
      for (std::uint32_t j = 0; j < st.size(); ++j) r.scales.push_back(st.scale(j));
      std::vector<float> h(static_cast<std::size_t>(st.history_length()) * st.size());
      st.export_te_history(0, st.size(), h);
      r.histories.insert(r.histories.end(), h.begin(), h.end());
    }
    r.after = snapshot_counts(mgr);
    out.push_back(std::move(r));
    torch::NoGradGuard no_grad;
    for (auto& l : net.layers)
      for (auto& p : l->parameters()) p.sub_(0.5 * p.grad());
  }
  return out;
}

}  // namespace

// ---- the hooks themselves ------------------------------------------------------------------------------

TEST_CASE("libtorch_hooks: in_backward follows the engine's current task; queue_callback only inside one") {
  libtorch_hooks h;
  CHECK_FALSE(h.in_backward());
  int fired = 0;
  auto bump = +[](void* c) { ++*static_cast<int*>(c); };
  CHECK_FALSE(h.queue_callback(bump, &fired));  // libtorch would throw here; the hook says "cannot"
  CHECK(fired == 0);

  struct queuer : torch::autograd::Function<queuer> {
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int* fired) {
      ctx->saved_data["p"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(fired));
      return x.clone();
    }
    static vl backward(torch::autograd::AutogradContext* ctx, vl g) {
      int* fired = reinterpret_cast<int*>(static_cast<std::intptr_t>(ctx->saved_data["p"].toInt()));
      libtorch_hooks hk;
      CHECK(hk.in_backward());
      CHECK(hk.queue_callback(+[](void* c) { *static_cast<int*>(c) += 10; }, fired));
      CHECK(*fired == 0);  // runs after every node of the task, not now
      return {g[0], torch::Tensor()};
    }
  };
  auto x = torch::ones({2}, torch::requires_grad());
  queuer::apply(x, &fired).sum().backward();
  CHECK(fired == 10);
  CHECK_FALSE(h.in_backward());
}

// ---- te-semantics §7 with engine_callback: one forward and one backward update per step ------------

TEST_CASE("A: whole model in one reentrant checkpoint") {
  cb_mgr mgr = make_mgr<cb_mgr>();
  auto ls = make_layers(mgr, 3);
  auto x = input();
  run_steps(mgr, 3, [&] { return checkpoint(mgr, [&](const vl& v) { return seq_all(ls, v); }, {x})[0]; });
}

TEST_CASE("A': whole model in one same-task checkpoint") {
  cb_mgr mgr = make_mgr<cb_mgr>();
  auto ls = make_layers(mgr, 3);
  auto x = input();
  run_steps(mgr, 3, [&] {
    return checkpoint(mgr, [&](const vl& v) { return seq_all(ls, v); }, {x}, checkpoint_mode::same_task)[0];
  });
}

TEST_CASE("B: per-layer checkpoint segments, reentrant and same-task") {
  for (const auto mode : {checkpoint_mode::reentrant, checkpoint_mode::same_task}) {
    CAPTURE(static_cast<int>(mode));
    cb_mgr mgr = make_mgr<cb_mgr>();
    auto ls = make_layers(mgr, 3);
    auto x = input();
    run_steps(mgr, 3, [&] {
      vl v{x};
      for (std::size_t i = 0; i < 3; ++i)
        v = checkpoint(mgr, [&, i](const vl& in) { return seq(ls, i, i + 1, in); }, v, mode);
      return v[0];
    });
  }
}

TEST_CASE("C: nested checkpoints (reentrant in reentrant, reentrant in same-task)") {
  for (const auto outer : {checkpoint_mode::reentrant, checkpoint_mode::same_task}) {
    CAPTURE(static_cast<int>(outer));
    cb_mgr mgr = make_mgr<cb_mgr>();
    auto ls = make_layers(mgr, 3);
    auto x = input();
    run_steps(mgr, 3, [&] {
      auto body = [&](const vl& v) {
        vl h = checkpoint(mgr, [&](const vl& in) { return seq(ls, 0, 1, in); }, v, checkpoint_mode::reentrant, "inner");
        return seq(ls, 1, 3, h);
      };
      return checkpoint(mgr, body, {x}, outer, "outer")[0];
    });
  }
}

TEST_CASE("D: nested autocast regions") {
  cb_mgr mgr = make_mgr<cb_mgr>();
  auto ls = make_layers(mgr, 2);
  auto x = input();
  run_steps(mgr, 3, [&] {
    torch::Tensor y;
    {
      libtorch_autocast<cb_mgr> inner(mgr);
      y = ls[0]->forward(x);
    }
    return ls[1]->forward(y);
  });
}

TEST_CASE("E: an inner autocast inside a checkpoint") {
  for (const auto mode : {checkpoint_mode::reentrant, checkpoint_mode::same_task}) {
    CAPTURE(static_cast<int>(mode));
    cb_mgr mgr = make_mgr<cb_mgr>();
    auto ls = make_layers(mgr, 2);
    auto x = input();
    run_steps(mgr, 3, [&] {
      auto body = [&](const vl& v) {
        torch::Tensor h;
        {
          libtorch_autocast<cb_mgr> inner(mgr);
          h = ls[0]->forward(v[0]);
        }
        return vl{ls[1]->forward(h)};
      };
      return checkpoint(mgr, body, {x}, mode)[0];
    });
  }
}

TEST_CASE("F / unused branch: a checkpointed branch whose output is dropped") {
  for (const auto mode : {checkpoint_mode::reentrant, checkpoint_mode::same_task}) {
    CAPTURE(static_cast<int>(mode));
    cb_mgr mgr = make_mgr<cb_mgr>();
    auto us = make_layers(mgr, 2, "U");
    auto vs = make_layers(mgr, 2, "V");
    auto x = input();
    run_steps(mgr, 4, [&] {
      torch::Tensor yu = checkpoint(mgr, [&](const vl& v) { return seq_all(us, v); }, {x}, mode, "unused")[0];
      CHECK(mgr.stats().outstanding_snapshots == 1);  // U's frame holds its snapshot while yu lives
      return seq_all(vs, {x})[0];  // yu (and with it U's frame) dies here: nothing leaks
    });
    CHECK_FALSE(us[0]->weight.grad().defined());  // U never ran backward
    CHECK(vs[0]->weight.grad().defined());
  }
}

TEST_CASE("G: sibling branches, plain + checkpointed and both checkpointed") {
  for (const bool both : {false, true}) {
    CAPTURE(both);
    cb_mgr mgr = make_mgr<cb_mgr>();
    auto as = make_layers(mgr, 2, "A");
    auto bs = make_layers(mgr, 2, "B");
    auto x = input();
    run_steps(mgr, 3, [&] {
      torch::Tensor ya = both ? checkpoint(mgr, [&](const vl& v) { return seq_all(as, v); }, {x})[0] : seq_all(as, {x})[0];
      torch::Tensor yb = checkpoint(mgr, [&](const vl& v) { return seq_all(bs, v); }, {x}, checkpoint_mode::same_task)[0];
      return ya + yb;
    });
    CHECK(torch::isfinite(x.grad()).all().item<bool>());
    // every branch's grad_output cast landed before the update: both have committed amaxes
    for (auto* l : {as[0].get(), bs[0].get()}) {
      const slot_id g = mgr.slot(l->handle(), backward_role::grad_output);
      CHECK(mgr.scale(g) != 1.0f);
      CHECK(mgr.staging_amax(g) == 0.0f);
    }
  }
}

TEST_CASE("J: a logical backward made of several autograd calls") {
  cb_mgr mgr = make_mgr<cb_mgr>();
  auto ls = make_layers(mgr, 2);
  auto x = input();
  for (int step = 0; step < 3; ++step) {
    const counts before = snapshot_counts(mgr);
    torch::Tensor l0, l1;
    {
      libtorch_autocast<cb_mgr> region(mgr);
      l0 = ls[0]->forward(x).sum();
      l1 = ls[1]->forward(x).sum();
    }
    {
      auto scope = mgr.backward_scope();
      l0.backward();
      l1.backward();
      CHECK(mgr.stats().backward_updates == before.backward);  // nothing until the scope ends
    }
    check_step(mgr, before);
  }
  // without a scope every autograd call is its own task and flushes on its own (TE #3456 as well)
  const counts before = snapshot_counts(mgr);
  torch::Tensor l0, l1;
  {
    libtorch_autocast<cb_mgr> region(mgr);
    l0 = ls[0]->forward(x).sum();
    l1 = ls[1]->forward(x).sum();
  }
  l0.backward();
  l1.backward();
  check_step(mgr, before, 1, 2);
}

TEST_CASE("K: eval-mode module in a checkpoint, switched to train before backward or not") {
  for (const auto mode : {checkpoint_mode::reentrant, checkpoint_mode::same_task}) {
    for (const bool to_train : {false, true}) {
      CAPTURE(static_cast<int>(mode));
      CAPTURE(to_train);
      cb_mgr mgr = make_mgr<cb_mgr>();
      auto ls = make_layers(mgr, 1);
      ls[0]->eval();
      auto x = input();
      const counts before = snapshot_counts(mgr);
      torch::Tensor y = checkpoint(mgr, [&](const vl& v) {
        libtorch_autocast<cb_mgr> region(mgr);
        return vl{ls[0]->forward(2 * v[0])};
      }, {x}, mode)[0];
      // TE: the autocast inside the checkpointed callable ran under no-grad: no forward update
      CHECK(mgr.stats().forward_updates == before.forward);
      if (to_train) ls[0]->train();
      y.sum().backward();
      check_step(mgr, before, 0, 1);
    }
  }
}

TEST_CASE("L: checkpoints under no-grad keep nothing") {
  cb_mgr mgr = make_mgr<cb_mgr>();
  auto ls = make_layers(mgr, 2);
  auto x = input(false);
  torch::NoGradGuard no_grad;
  for (int step = 0; step < 3; ++step) {
    const counts before = snapshot_counts(mgr);
    {
      libtorch_autocast<cb_mgr> region(mgr);
      for (const auto mode : {checkpoint_mode::reentrant, checkpoint_mode::same_task}) {
        torch::Tensor y = checkpoint(mgr, [&](const vl& v) { return seq_all(ls, v); }, {x}, mode)[0];
        CHECK_FALSE(y.requires_grad());
      }
    }
    check_step(mgr, before, 0, 0);  // no grad: no forward update either (TE gates it on grad mode)
  }
}

TEST_CASE("M: grad enabled but no checkpoint input needs grad: no snapshot") {
  cb_mgr mgr = make_mgr<cb_mgr>();
  auto ls = make_layers(mgr, 2);
  auto x = input(false);
  const counts before = snapshot_counts(mgr);
  torch::Tensor y;
  {
    libtorch_autocast<cb_mgr> region(mgr);
    y = checkpoint(mgr, [&](const vl& v) { return seq_all(ls, v); }, {x})[0];
    CHECK(mgr.stats().outstanding_snapshots == 0);
  }
  CHECK_FALSE(y.requires_grad());
  check_step(mgr, before, 1, 0);
}

TEST_CASE("N: an ineligible reentrant checkpoint inside an outer same-task replay keeps the replay") {
  // The outer replay must see exactly the original forward, including the inner (inactive) frame's
  // modules: compared bit for bit with the same graph without checkpoints.
  auto run = [](bool checkpointed) {
    cb_mgr mgr = make_mgr<cb_mgr>();
    auto ls = make_layers(mgr, 2);
    torch::manual_seed(5);
    const torch::Tensor c = torch::randn({batch, hidden});  // needs no grad
    std::vector<torch::Tensor> grads;
    for (int step = 0; step < 3; ++step) {
      auto x = input(true, 40 + static_cast<std::uint64_t>(step));
      for (auto& l : ls) l->zero_grad();
      const counts before = snapshot_counts(mgr);
      auto body = [&](const vl& v) {
        torch::Tensor a = ls[0]->forward(v[0]);
        torch::Tensor b = checkpointed ? checkpoint(mgr, [&](const vl& w) { return vl{ls[1]->forward(w[0])}; }, {c},
                                                    checkpoint_mode::reentrant, "inner")[0]
                                       : ls[1]->forward(c).detach();
        return vl{a * b};
      };
      torch::Tensor loss;
      {
        libtorch_autocast<cb_mgr> region(mgr);
        loss = (checkpointed ? checkpoint(mgr, body, {x}, checkpoint_mode::same_task, "outer")[0] : body({x})[0]).sum();
      }
      loss.backward();
      check_step(mgr, before);
      CHECK_FALSE(ls[1]->weight.grad().defined());
      grads.push_back(x.grad().clone());
      grads.push_back(ls[0]->weight.grad().clone());
      torch::NoGradGuard ng;
      ls[0]->weight.sub_(0.5 * ls[0]->weight.grad());
    }
    return grads;
  };
  const auto plain = run(false);
  const auto ckpt = run(true);
  REQUIRE(plain.size() == ckpt.size());
  for (std::size_t i = 0; i < plain.size(); ++i) CHECK(torch::equal(plain[i], ckpt[i]));
}

TEST_CASE("O: exceptions in the checkpointed forward and in the replay leave a clean state") {
  for (const auto mode : {checkpoint_mode::reentrant, checkpoint_mode::same_task}) {
    CAPTURE(static_cast<int>(mode));
    cb_mgr mgr = make_mgr<cb_mgr>();
    auto ls = make_layers(mgr, 2);
    auto x = input();
    // the original forward throws
    {
      const counts before = snapshot_counts(mgr);
      auto throwing = [&](const vl& v) -> vl {
        (void)ls[0]->forward(v[0]);
        throw std::runtime_error("forward failed");
      };
      CHECK_THROWS_WITH_AS(
          {
            libtorch_autocast<cb_mgr> region(mgr);
            (void)checkpoint(mgr, throwing, {x}, mode);
          },
          "forward failed", std::runtime_error);
      check_step(mgr, before, 0, 0);
    }
    // the replay throws (the second call of the body)
    {
      const counts before = snapshot_counts(mgr);
      int calls = 0;
      auto second_throws = [&](const vl& v) -> vl {
        if (++calls == 2) throw std::runtime_error("replay failed");
        return seq_all(ls, v);
      };
      torch::Tensor y;
      {
        libtorch_autocast<cb_mgr> region(mgr);
        y = checkpoint(mgr, second_throws, {x}, mode)[0];
      }
      CHECK_THROWS_WITH(y.sum().backward(), doctest::Contains("replay failed"));
      const auto s = mgr.stats();
      CHECK(s.checkpoint_depth == 0);
      CHECK(s.outstanding_snapshots == 0);
      CHECK(s.forward_updates - before.forward == 1);
      CHECK(s.backward_updates == before.backward);
    }
    // recovery: the next step is an ordinary one
    run_steps(mgr, 2, [&] { return checkpoint(mgr, [&](const vl& v) { return seq_all(ls, v); }, {x}, mode)[0]; });
  }
}

// ---- plain versus checkpointed training, bit for bit ------------------------------------------------

TEST_CASE("3-layer MLP, 4 steps, delayed scaling: checkpointed training is bit-identical to plain") {
  const auto plain = train<cb_mgr>(ckpt::plain, 4);
  for (const auto mode : {ckpt::reentrant, ckpt::same_task, ckpt::per_layer_reentrant, ckpt::per_layer_same_task,
                          ckpt::nested, ckpt::nested_mixed}) {
    CAPTURE(static_cast<int>(mode));
    const auto run = train<cb_mgr>(mode, 4);
    REQUIRE(run.size() == plain.size());
    for (std::size_t s = 0; s < plain.size(); ++s) {
      CAPTURE(s);
      CHECK(run[s].loss == plain[s].loss);
      REQUIRE(run[s].grads.size() == plain[s].grads.size());
      for (std::size_t g = 0; g < plain[s].grads.size(); ++g) CHECK(torch::equal(run[s].grads[g], plain[s].grads[g]));
      CHECK(run[s].scales == plain[s].scales);
      CHECK(run[s].histories == plain[s].histories);
      CHECK(run[s].after.forward == s + 1);
      CHECK(run[s].after.backward == s + 1);
    }
  }
  // the comparison can fail: scales did move and the losses differ from step to step
  CHECK(plain.back().scales != plain.front().scales);
  CHECK(plain[0].loss != plain[1].loss);
}

TEST_CASE("the replay really needs the forward's RNG state: a disturbed stream changes the gradients") {
  // What the bit-identity above relies on: the same reentrant run, except that the replay sees a
  // different random stream, gives different gradients (the dropout masks no longer match).
  auto run = [](bool disturb) {
    cb_mgr mgr = make_mgr<cb_mgr>();
    mlp<cb_mgr> net(mgr);
    auto x = input();
    int calls = 0;
    auto body = [&](const vl& v) {
      if (++calls == 2 && disturb) torch::manual_seed(999);
      return net.blocks(0, 3, v);
    };
    torch::manual_seed(1);
    torch::Tensor y;
    {
      libtorch_autocast<cb_mgr> region(mgr);
      y = checkpoint(mgr, body, {x})[0];
    }
    y.pow(2).mean().backward();
    CHECK(calls == 2);
    return x.grad().clone();
  };
  CHECK(torch::equal(run(false), run(false)));
  CHECK_FALSE(torch::equal(run(false), run(true)));
}

// ---- every recipe through the quantized linear layer -------------------------------------------------------

TEST_CASE_TEMPLATE("every recipe trains through quantized_linear and checkpoints", R, current_scaling, mxfp8_scaling,
                   block_scaling) {
  using M = quantization_manager<R, hooks_boundary>;
  M mgr{};
  auto ls = [&] {
    torch::manual_seed(3);
    std::vector<layer_ptr<M>> v;
    for (int i = 0; i < 2; ++i)
      v.push_back(std::make_shared<quantized_linear<M>>(mgr, "L" + std::to_string(i), 128, 128));
    return v;
  }();
  torch::manual_seed(4);
  auto x = torch::randn({128, 128}).requires_grad_(true);
  std::vector<torch::Tensor> grads;
  for (const bool ck : {false, true}) {
    x.mutable_grad() = torch::Tensor();
    torch::Tensor y;
    {
      libtorch_autocast<M> region(mgr);
      y = ck ? checkpoint(mgr, [&](const vl& v) { return seq_all(ls, v); }, {x})[0] : seq_all(ls, {x})[0];
    }
    y.pow(2).sum().backward();
    grads.push_back(x.grad().clone());
    CHECK(mgr.stats().pending == false);
    CHECK(mgr.stats().outstanding_snapshots == 0);
  }
  CHECK(torch::equal(grads[0], grads[1]));  // stateless: the replay recomputes the same casts
  // the casts quantize: the FP8 result differs from float math, but not by much
  torch::Tensor ref = x.detach();
  for (auto& l : ls) ref = torch::addmm(l->bias, ref, l->weight.t());
  torch::Tensor y;
  {
    libtorch_autocast<M> region(mgr);
    y = seq_all(ls, {x.detach()})[0];
  }
  CHECK_FALSE(torch::equal(y, ref));
  CHECK(((y - ref).abs().max() / ref.abs().max()).item<float>() < 0.15f);
}

TEST_CASE("fake_quantize: per-tensor delayed cast uses the plan's scale and records the amax") {
  const torch::Tensor x = torch::tensor({1.0f, -3.0f, 0.3f, 500.0f}).reshape({2, 2});
  float scale = 2.0f, amax = 1.0f;
  const cast_plan plan{&scale, &amax, fp8_dtype::e4m3};
  const torch::Tensor q = fake_quantize(plan, x, block_axis::rowwise);
  CHECK(amax == 500.0f);
  const float* p = q.data_ptr<float>();
  CHECK(p[0] == 1.0f);
  CHECK(p[1] == -3.0f);
  CHECK(p[2] == decode_e4m3(encode_e4m3(0.6f)) / 2.0f);
  CHECK(p[3] == 224.0f);  // 1000 saturates to 448, / 2
  CHECK_THROWS_AS((void)fake_quantize(plan, x.to(torch::kDouble), block_axis::rowwise), tequant::error);
  cast_plan mx{};
  mx.mode = scaling_mode::mxfp8;
  CHECK_THROWS_AS((void)fake_quantize(mx, x, block_axis::rowwise), tequant::error);  // 2x2 is not a multiple of 32
  cast_plan off = plan;
  off.enabled = false;  // a plan from outside an enabled autocast region is never cast
  CHECK_THROWS_AS((void)fake_quantize(off, x, block_axis::rowwise), tequant::error);
}

// ---- NVFP4 through the quantized linear layer -------------------------------------------------------

namespace {

/// One direction of a host cast of x2d with `plan`, decoded to float: the reference the layer must
/// match, made with the backend's entry points directly (not through libtorch.hpp's helpers).
struct reference_cast {
  torch::Tensor rowwise, columnwise;
};

reference_cast host_cast(const cast_plan& plan, const torch::Tensor& x2d) {
  const host_backend be{};
  const auto M = static_cast<std::size_t>(x2d.size(0)), K = static_cast<std::size_t>(x2d.size(1));
  quantized_tensor<host_backend> q;
  q.prepare(be, plan, M, K, true, true);
  be.quantize(matrix_view<const float>{x2d.data_ptr<float>(), M, K}, plan, q.output());
  reference_cast r{torch::empty_like(x2d), torch::empty_like(x2d)};
  be.dequantize(plan, M, K, q.output(), false, {r.rowwise.data_ptr<float>(), M * K});
  be.dequantize(plan, M, K, q.output(), true, {r.columnwise.data_ptr<float>(), M * K});
  return r;
}

cast_plan nvfp4_plan(bool tile_2d, std::uint64_t* rng_offset = nullptr) {
  cast_plan p{nullptr, nullptr, fp8_dtype::e4m3, scaling_mode::nvfp4};
  p.tile_2d = tile_2d;
  // As the recipe plans with default params: the Hadamard transform on every columnwise copy but the
  // (2D-tiled) weights'.
  p.columnwise_rht = !tile_2d && nvfp4_params{}.random_hadamard_transform;
  p.rng_offset = rng_offset;
  p.rng_seed = rng_offset != nullptr ? nvfp4_params{}.seed : 0;
  return p;
}

/// NVFP4 whose forward inputs round stochastically too (built through the recipe concept alone): the
/// casts a checkpoint replay must reproduce bit for bit (TE's NVFP4 rounds only gradients, which are
/// never replayed).
struct nvfp4_sr_inputs : nvfp4_scaling {
  static constexpr std::string_view name = "nvfp4_sr_inputs";
  static cast_plan plan(const nvfp4_params& p, nvfp4_rng_state& s, slot_id slot) noexcept {
    cast_plan c = nvfp4_scaling::plan(p, s, slot);
    if (slot.dir == direction::forward && role_of(slot) == tensor_role::input) {
      c.rng_offset = &s.offsets[slot.index];
      c.rng_seed = s.seed;
    }
    return c;
  }
};

}  // namespace

TEST_CASE("NVFP4 through quantized_linear: forward and backward match host reference casts, 1/1 updates") {
  using M = quantization_manager<nvfp4_scaling, hooks_boundary>;
  M mgr{};
  torch::manual_seed(21);
  quantized_linear<M> layer(mgr, "L", 64, 32);
  const slot_id g_slot = mgr.slot(layer.handle(), backward_role::grad_output);
  // the slot's stream starts where the recipe puts it; the reference continues it step after step
  std::uint64_t ref_offset = g_slot.index * nvfp4_scaling::slot_stream_stride;
  for (int step = 0; step < 2; ++step) {
    CAPTURE(step);
    const counts before = snapshot_counts(mgr);
    torch::manual_seed(30 + static_cast<std::uint64_t>(step));
    const torch::Tensor x = torch::randn({48, 64}).requires_grad_(true);
    const torch::Tensor upstream = torch::randn({48, 32});  // dy: the loss is sum(y * upstream)
    layer.weight.mutable_grad() = torch::Tensor();
    torch::Tensor y;
    {
      libtorch_autocast<M> region(mgr);
      y = layer.forward(x);
    }
    (y * upstream).sum().backward();
    check_step(mgr, before);

    torch::NoGradGuard no_grad;
    const reference_cast xr = host_cast(nvfp4_plan(false), x.detach().contiguous());
    const reference_cast wr = host_cast(nvfp4_plan(true), layer.weight.detach().contiguous());  // 16x16 tiles
    CHECK(torch::equal(y, torch::addmm(layer.bias, xr.rowwise, wr.rowwise.t())));
    CHECK_FALSE(torch::equal(xr.rowwise, x));  // the cast is lossy: the check above could fail

    const std::uint64_t drawn_from = ref_offset;
    const reference_cast gr = host_cast(nvfp4_plan(false, &ref_offset), upstream);  // stochastic rounding
    CHECK(ref_offset > drawn_from);
    CHECK(torch::equal(x.grad(), gr.rowwise.matmul(wr.columnwise)));
    CHECK(torch::equal(layer.weight.grad(), gr.columnwise.t().matmul(xr.columnwise)));
    CHECK(torch::equal(layer.bias.grad(), upstream.sum(0)));
    // round to nearest gives other gradients: the layer did round stochastically
    CHECK_FALSE(torch::equal(host_cast(nvfp4_plan(false), upstream).rowwise, gr.rowwise));
    layer.bias.mutable_grad() = torch::Tensor();
  }
  // the manager's stream sits where the reference's does after the two steps
  auto scope = mgr.backward_scope();
  const cast_plan live = mgr.plan_cast(g_slot);
  REQUIRE(live.rng_offset != nullptr);
  CHECK(*live.rng_offset == ref_offset);
}

TEST_CASE("NVFP4 through quantized_linear: checkpoint replays reproduce the forward's random bits") {
  using M = quantization_manager<nvfp4_sr_inputs, hooks_boundary>;
  // One step of two layers on a fresh manager (the same stream positions every time): plain, or
  // checkpointed either way. A replay that drew new bits would change the forward it differentiates.
  auto run = [](int mode) {
    M mgr{};
    torch::manual_seed(3);
    std::vector<std::shared_ptr<quantized_linear<M>>> ls;
    for (int i = 0; i < 2; ++i)
      ls.push_back(std::make_shared<quantized_linear<M>>(mgr, "L" + std::to_string(i), 64, 64));
    torch::manual_seed(4);
    auto x = torch::randn({32, 64}).requires_grad_(true);
    const counts before = snapshot_counts(mgr);
    torch::Tensor y;
    {
      libtorch_autocast<M> region(mgr);
      auto body = [&](const vl& v) { return seq_all(ls, v); };
      const checkpoint_mode cm = mode == 1 ? checkpoint_mode::reentrant : checkpoint_mode::same_task;
      y = mode == 0 ? body({x})[0] : checkpoint(mgr, body, {x}, cm)[0];
    }
    y.pow(2).sum().backward();
    check_step(mgr, before);
    return std::vector<torch::Tensor>{y.detach(), x.grad(), ls[0]->weight.grad(), ls[1]->weight.grad()};
  };
  const auto plain = run(0);
  for (const int mode : {1, 2}) {
    CAPTURE(mode);
    const auto ck = run(mode);
    for (std::size_t i = 0; i < plain.size(); ++i) CHECK(torch::equal(plain[i], ck[i]));
  }
}

// ---- issue 16: graph shapes beyond checkpoints -------------------------------------------------------

namespace {

/// A custom op whose backward runs backward() on a sub-graph built in its forward (a gradient
/// penalty's shape): a nested GraphTask that is not a checkpoint replay.
template <class M>
struct nested_backward_op : torch::autograd::Function<nested_backward_op<M>> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               quantized_linear<M>* inner) {
    torch::Tensor sub;
    {
      torch::AutoGradMode on(true);
      sub = inner->forward(x.detach().requires_grad_(true)).pow(2).sum();
    }
    ctx->saved_data["sub"] = sub;
    return x.clone();
  }
  static vl backward(torch::autograd::AutogradContext* ctx, vl g) {
    const torch::Tensor sub = ctx->saved_data["sub"].toTensor();
    torch::autograd::backward({sub});  // nested task: its quantized_linear requests the update first
    return {g[0], torch::Tensor()};
  }
};

/// Identity whose backward raises while *fail is set.
struct failing_op : torch::autograd::Function<failing_op> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, bool* fail) {
    ctx->saved_data["fail"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(fail));
    return x.clone();
  }
  static vl backward(torch::autograd::AutogradContext* ctx, vl g) {
    if (*reinterpret_cast<bool*>(static_cast<std::intptr_t>(ctx->saved_data["fail"].toInt())))
      throw std::runtime_error("failing_op: injected backward failure");
    return {g[0], torch::Tensor()};
  }
};

}  // namespace

TEST_CASE("libtorch_hooks: task depth 0 in a top-level backward, 1 in a backward() run by a node") {
  struct probe : torch::autograd::Function<probe> {
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::vector<std::uint32_t>* d) {
      ctx->saved_data["d"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(d));
      return x.clone();
    }
    static vl backward(torch::autograd::AutogradContext* ctx, vl g) {
      auto* d = reinterpret_cast<std::vector<std::uint32_t>*>(static_cast<std::intptr_t>(ctx->saved_data["d"].toInt()));
      d->push_back(libtorch_hooks{}.task_depth());
      if (d->size() == 1) {  // run a nested backward through another probe
        torch::Tensor z = torch::ones({2}, torch::requires_grad());
        torch::Tensor y;
        {
          torch::AutoGradMode on(true);
          y = probe::apply(z, d).sum();
        }
        torch::autograd::backward({y});
      }
      return {g[0], torch::Tensor()};
    }
  };
  std::vector<std::uint32_t> depth;
  CHECK(libtorch_hooks{}.task_depth() == 0);
  probe::apply(torch::ones({2}, torch::requires_grad()), &depth).sum().backward();
  CHECK(depth == std::vector<std::uint32_t>{0, 1});
}

TEST_CASE("libtorch_hooks: a failed task's callback is reported dropped, a completed one is not") {
  struct queue_then_fail : torch::autograd::Function<queue_then_fail> {
    static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, int* counters, bool fail) {
      ctx->saved_data["c"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(counters));
      ctx->saved_data["fail"] = fail;
      return x.clone();
    }
    static vl backward(torch::autograd::AutogradContext* ctx, vl g) {
      int* c = reinterpret_cast<int*>(static_cast<std::intptr_t>(ctx->saved_data["c"].toInt()));
      CHECK(libtorch_hooks{}.queue_callback(+[](void* p) { ++static_cast<int*>(p)[0]; },
                                            +[](void* p) { ++static_cast<int*>(p)[1]; }, c));
      if (ctx->saved_data["fail"].toBool()) throw std::runtime_error("queue_then_fail");
      return {g[0], torch::Tensor(), torch::Tensor()};
    }
  };
  int counters[2] = {0, 0};
  queue_then_fail::apply(torch::ones({2}, torch::requires_grad()), counters, false).sum().backward();
  CHECK(counters[0] == 1);
  CHECK(counters[1] == 0);
  CHECK_THROWS(queue_then_fail::apply(torch::ones({2}, torch::requires_grad()), counters, true).sum().backward());
  CHECK(counters[0] == 1);
  CHECK(counters[1] == 1);
}

TEST_CASE("engine_callback on libtorch: a custom op's nested backward() does not flush by itself") {
  cb_mgr mgr = make_mgr<cb_mgr>();
  auto ls = make_layers(mgr, 3);
  auto x = input();
  // L0 -> L1 -> op (its nested backward runs through L2) -> loss: the nested task's L2 requests first.
  run_steps(mgr, 3, [&] {
    torch::Tensor h = ls[1]->forward(ls[0]->forward(x));
    return nested_backward_op<cb_mgr>::apply(h, ls[2].get());
  });
}

TEST_CASE("engine_callback on libtorch: a backward that raised, retried, flushes at the retry's end") {
  cb_mgr mgr = make_mgr<cb_mgr>();
  auto ls = make_layers(mgr, 2);
  auto x = input();
  bool fail = true;
  const counts before = snapshot_counts(mgr);
  torch::Tensor loss;
  {
    libtorch_autocast<cb_mgr> region(mgr);
    loss = ls[1]->forward(ls[0]->forward(failing_op::apply(x, &fail))).sum();
  }
  // The layers' backwards request (the callback is queued), then failing_op raises: the task is dropped.
  CHECK_THROWS_WITH(torch::autograd::backward({loss}, {}, /*retain_graph=*/true), doctest::Contains("injected"));
  CHECK(mgr.stats().backward_updates == before.backward);
  CHECK(mgr.stats().pending);
  fail = false;
  loss.backward();  // the retry: one flush at its end, not at the next step's autocast entry
  check_step(mgr, before, 1, 1);
}

TEST_CASE("quantized_linear outside an enabled autocast region runs in FP32 and stages nothing") {
  cb_mgr mgr = make_mgr<cb_mgr>();
  auto ls = make_layers(mgr, 2);
  auto x = input();
  const counts before = snapshot_counts(mgr);
  torch::Tensor y, ref;
  {
    libtorch_autocast<cb_mgr> region(mgr, /*enabled=*/false);
    y = ls[1]->forward(ls[0]->forward(x));
  }
  {
    torch::NoGradGuard off;
    ref = torch::addmm(ls[1]->bias, torch::addmm(ls[0]->bias, x, ls[0]->weight.t()), ls[1]->weight.t());
  }
  CHECK(torch::equal(y.detach(), ref));
  y.sum().backward();
  const auto s = mgr.stats();
  CHECK(s.forward_updates == before.forward);  // a disabled region does not update
  CHECK(s.backward_updates == before.backward);
  CHECK_FALSE(s.pending);
  CHECK(mgr.staging_amax(mgr.slot(ls[0]->handle(), backward_role::grad_output)) == 0.0f);
}

TEST_CASE("fp8_linear, the layer's old name, still builds and trains the same layer") {
  static_assert(std::is_same_v<fp8_linear<cb_mgr>, quantized_linear<cb_mgr>>);
  static_assert(std::is_same_v<fp8_linear_function<cb_mgr>, quantized_linear_function<cb_mgr>>);
  cb_mgr mgr = make_mgr<cb_mgr>();
  torch::manual_seed(7);
  auto old_name = std::make_shared<fp8_linear<cb_mgr>>(mgr, "old", hidden, hidden);
  auto x = input();
  run_steps(mgr, 2, [&] { return old_name->forward(x); });
  CHECK(old_name->weight.grad().defined());
  CHECK(mgr.scale(mgr.slot(old_name->handle(), forward_role::input)) != 1.0f);  // the updates took effect
}


// ---- issue 16 on libtorch: a failed backward, a replay outside autocast, a user's recipe ------------

namespace {

struct fault_run {
  std::vector<float> losses, histories;
  counts end{};
  int failures = 0;
};

// 6 SGD steps of the 3-layer MLP (no dropout: plain blocks) with failing_op below the layers; the
// backward of step `failing` raises after every quantized_linear has run its backward.
template <class Boundary>
fault_run train_with_fault(int failing) {
  auto mgr = make_mgr<delayed_mgr<Boundary>>();
  auto ls = make_layers(mgr, 3);
  fault_run r;
  for (int step = 0; step < 6; ++step) {
    bool fail = step == failing;
    torch::Tensor x = input(true, 300 + static_cast<std::uint64_t>(step));
    for (auto& l : ls) l->zero_grad();
    torch::Tensor loss;
    {
      libtorch_autocast<delayed_mgr<Boundary>> region(mgr);
      loss = seq_all(ls, {failing_op::apply(x, &fail)})[0].pow(2).mean();
    }
    try {
      if constexpr (std::is_same_v<Boundary, explicit_scope>) {
        auto scope = mgr.backward_scope();
        loss.backward();
      } else {
        loss.backward();
      }
    } catch (const std::exception&) {
      ++r.failures;
    }
    r.losses.push_back(loss.item<float>());
    torch::NoGradGuard no_grad;
    for (auto& l : ls)
      for (auto& p : l->parameters())
        if (p.grad().defined()) p.sub_(0.5 * p.grad());
  }
  mgr.flush_backward_update();
  r.end = snapshot_counts(mgr);
  for (std::uint32_t b = 0; b < mgr.bucket_count(); ++b) {
    const auto& st = mgr.recipe_state()[b];
    std::vector<float> h(static_cast<std::size_t>(st.history_length()) * st.size());
    st.export_te_history(0, st.size(), h);
    r.histories.insert(r.histories.end(), h.begin(), h.end());
    for (std::uint32_t j = 0; j < st.size(); ++j) r.histories.push_back(st.scale(j));
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (tequant::detail::float_bits(a[i]) != tequant::detail::float_bits(b[i])) return false;
  return true;
}

}  // namespace

TEST_CASE("a backward that raises mid-training: the three fixed boundaries train identically, 6 updates in 6 steps") {
  const fault_run cb = train_with_fault<hooks_boundary>(2);
  const fault_run ac = train_with_fault<autocast_entry>(2);
  const fault_run sc = train_with_fault<explicit_scope>(2);
  for (const fault_run* r : {&cb, &ac, &sc}) {
    CHECK(r->failures == 1);
    CHECK(r->end.forward == 6);
    CHECK(r->end.backward == 6);
  }
  CHECK(same_bits(cb.losses, ac.losses));
  CHECK(same_bits(cb.losses, sc.losses));
  CHECK(same_bits(cb.histories, ac.histories));
  CHECK(same_bits(cb.histories, sc.histories));
}

TEST_CASE("a replay outside any enabled autocast region casts as its forward did: FP32 when recorded disabled") {
  for (const ckpt mode : {ckpt::reentrant, ckpt::same_task, ckpt::nested, ckpt::nested_mixed}) {
    CAPTURE(static_cast<int>(mode));
    std::vector<torch::Tensor> grads[2];
    float losses[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
      cb_mgr mgr = make_mgr<cb_mgr>();
      mlp<cb_mgr> net(mgr);
      torch::manual_seed(99);
      torch::Tensor x = input(true, 5);
      torch::Tensor loss;
      {
        libtorch_autocast<cb_mgr> region(mgr, /*enabled=*/false);
        loss = net.forward(k == 0 ? ckpt::plain : mode, x).pow(2).mean();
      }
      loss.backward();  // the replay runs here, after the region closed
      losses[k] = loss.item<float>();
      grads[k].push_back(x.grad());
      for (auto& l : net.layers) grads[k].push_back(l->weight.grad());
      const auto s = mgr.stats();
      CHECK(s.forward_updates == 0);
      CHECK(s.backward_updates == 0);
      CHECK_FALSE(s.pending);
      CHECK(s.outstanding_snapshots == 0);
    }
    CHECK(losses[0] == losses[1]);
    for (std::size_t i = 0; i < grads[0].size(); ++i) CHECK(torch::equal(grads[0][i], grads[1][i]));
  }
}

TEST_CASE("a recipe written outside the library trains through quantized_linear and its checkpoint") {
  using ema_mgr = quantization_manager<custom::ema_current_scaling, hooks_boundary>;
  ema_mgr mgr(custom::ema_params{});
  mlp<ema_mgr> net(mgr);
  torch::manual_seed(5);
  for (int step = 0; step < 3; ++step) {
    const counts before = snapshot_counts(mgr);
    torch::Tensor x = input(true, 40 + static_cast<std::uint64_t>(step));
    torch::Tensor loss;
    {
      libtorch_autocast<ema_mgr> region(mgr);
      loss = net.forward(ckpt::nested, x).pow(2).mean();
    }
    loss.backward();
    check_step(mgr, before);
    CHECK(std::isfinite(loss.item<float>()));
  }
  // The scales follow the recipe's moving average (no longer the initial 1).
  const auto s = mgr.slot(net.layers[0]->handle(), forward_role::input);
  CHECK(mgr.scale(s) != 1.0f);
  CHECK(mgr.scale(s) > 0.0f);
}

// ---- TE's old first-module ownership on the same graphs -------------------------------------------

TEST_CASE("first_module_owner reproduces TE's failures on the same libtorch graphs") {
  SUBCASE("A: every replayed module owns: three backward updates per step (too many)") {
    owner_mgr mgr = make_mgr<owner_mgr>();
    auto ls = make_layers(mgr, 3);
    auto x = input();
    run_steps(mgr, 2, [&] { return checkpoint(mgr, [&](const vl& v) { return seq_all(ls, v); }, {x})[0]; }, 1, 3);
  }
  SUBCASE("B: per-layer segments: one owner per segment replay") {
    owner_mgr mgr = make_mgr<owner_mgr>();
    auto ls = make_layers(mgr, 3);
    auto x = input();
    run_steps(mgr, 2, [&] {
      vl v{x};
      for (std::size_t i = 0; i < 3; ++i) v = checkpoint(mgr, [&, i](const vl& in) { return seq(ls, i, i + 1, in); }, v);
      return v[0];
    }, 1, 3);
  }
  SUBCASE("D: a nested autocast's exit revives consumed ownership: two updates") {
    owner_mgr mgr = make_mgr<owner_mgr>();
    auto ls = make_layers(mgr, 2);
    auto x = input();
    run_steps(mgr, 2, [&] {
      torch::Tensor y;
      {
        libtorch_autocast<owner_mgr> inner(mgr);
        y = ls[0]->forward(x);
      }
      return ls[1]->forward(y);
    }, 1, 2);
  }
  SUBCASE("F: the owner's output is dropped: the backward update is lost (never)") {
    owner_mgr mgr = make_mgr<owner_mgr>();
    auto us = make_layers(mgr, 1, "U");
    auto vs = make_layers(mgr, 2, "V");
    auto x = input();
    run_steps(mgr, 2, [&] {
      (void)seq_all(us, {x});
      return seq_all(vs, {x})[0];
    }, 1, 0);
    // the grad_output amaxes were recorded and never committed
    CHECK(mgr.staging_amax(mgr.slot(vs[0]->handle(), backward_role::grad_output)) > 0.0f);
  }
  SUBCASE("G: both sibling branches checkpointed: every recomputed module owns") {
    owner_mgr mgr = make_mgr<owner_mgr>();
    auto as = make_layers(mgr, 2, "A");
    auto bs = make_layers(mgr, 2, "B");
    auto x = input();
    run_steps(mgr, 2, [&] {
      return checkpoint(mgr, [&](const vl& v) { return seq_all(as, v); }, {x})[0] +
             checkpoint(mgr, [&](const vl& v) { return seq_all(bs, v); }, {x})[0];
    }, 1, 4);
  }
  SUBCASE("the same graph without checkpoints is fine under the old rule too") {
    owner_mgr mgr = make_mgr<owner_mgr>();
    auto ls = make_layers(mgr, 3);
    auto x = input();
    run_steps(mgr, 2, [&] { return seq_all(ls, {x})[0]; });
  }
}
