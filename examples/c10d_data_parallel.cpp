// SPDX-License-Identifier: Apache-2.0
// Data-parallel FP8 training with libtorch over c10d: N processes, each with its shard of every global
// batch, gradients summed with the same Gloo process group that reduces tequant's amaxes (c10d_comm).
// Every step it checks that all ranks hold bit-identical scales and amax histories (a checksum
// compared across ranks), that each rank ran one forward and one backward update, and compares the
// global loss with a one-process run over the whole global batch (trained beside it on rank 0).
//
//   c10d_data_parallel [--ranks N] [--steps S]
// starts N local ranks (a FileStore in a fresh temporary directory is the rendezvous; on several
// machines use a TCPStore as docs/distributed.md shows).
#include "tequant/integration/c10d_comm.hpp"
#include "tequant/integration/libtorch.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c10d_ranks.hpp"
#include "gpt/checksum.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/comm/single_process.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

template <class Comm>
using manager_t = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::engine_callback<tequant::libtorch_hooks>,
                                                tequant::stacked_recompute, Comm>;

constexpr std::int64_t global_batch = 256;
constexpr std::uint32_t history = 16;

template <class Manager>
struct model : torch::nn::Module {
  explicit model(Manager& mgr) {
    torch::manual_seed(0);  // the same initial weights on every rank and in the reference
    for (int i = 0; i < 3; ++i)
      layers.push_back(register_module("fc" + std::to_string(i),
                                       std::make_shared<tequant::fp8_linear<Manager>>(
                                           mgr, "fc" + std::to_string(i), i == 0 ? 16 : 64, i == 2 ? 1 : 64)));
  }
  torch::Tensor forward(torch::Tensor h) {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      h = layers[i]->forward(h);
      if (i + 1 < layers.size()) h = torch::gelu(h);
    }
    return h;
  }
  std::vector<std::shared_ptr<tequant::fp8_linear<Manager>>> layers;
};

/// Global batch `step`: the same on every rank (a rank then takes its rows).
std::pair<torch::Tensor, torch::Tensor> batch(int step) {
  torch::manual_seed(1000 + step);
  torch::Tensor x = torch::randn({global_batch, 16});
  torch::Tensor y = torch::sin(x.narrow(1, 0, 4).sum(1, true)) + 0.1 * x.narrow(1, 4, 1);
  return {x, y};
}

using gpt::state_checksum;  // every bucket's scales and amax history: equal checksums = bit-identical state

constexpr std::chrono::seconds timeout{30};  // of every collective

void all_reduce(c10d::ProcessGroup& pg, torch::Tensor& t, c10d::ReduceOp::RedOpType op) {
  c10d_ranks::all_reduce(pg, t, op, "c10d_data_parallel");
}

/// Sums every parameter's gradient over the ranks, in one allreduce of the flattened gradients.
void sum_gradients(c10d::ProcessGroup& pg, const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) grads.push_back(p.grad().reshape({-1}));
  torch::Tensor flat = torch::cat(grads);
  all_reduce(pg, flat, c10d::ReduceOp::SUM);
  std::int64_t at = 0;
  for (const auto& p : params) {
    const std::int64_t n = p.grad().numel();
    p.grad().copy_(flat.narrow(0, at, n).view_as(p.grad()));
    at += n;
  }
}

/// One training step on rows [begin, begin + rows) of the global batch. The loss is the squared
/// error summed over the rows divided by the GLOBAL batch, so that the gradients summed over the ranks
/// (and the gradients the backward casts see, hence their amaxes) are those of the whole batch.
template <class Manager>
float train_step(Manager& mgr, model<Manager>& net, torch::optim::SGD& opt, const torch::Tensor& x,
                 const torch::Tensor& y, c10d::ProcessGroup* pg) {
  opt.zero_grad();
  torch::Tensor loss;
  {
    tequant::libtorch_autocast<Manager> fp8(mgr);
    loss = (net.forward(x) - y).pow(2).sum() / static_cast<double>(global_batch);
  }
  loss.backward();  // the backward update (amax all-reduce included) runs when the engine's task ends
  if (pg != nullptr) sum_gradients(*pg, net.parameters());
  opt.step();
  return loss.item<float>();
}

int run_rank(const c10d_ranks::rendezvous& r, int steps) {
  const int rank = r.rank, ranks = r.world;
  c10::intrusive_ptr<c10d::ProcessGroup> pg = c10d_ranks::connect(r);

  const tequant::delayed_params params{.format = tequant::fp8_format::hybrid, .history_length = history};
  manager_t<tequant::c10d_comm> mgr(params, {}, tequant::c10d_comm(pg));
  model<manager_t<tequant::c10d_comm>> net(mgr);
  torch::optim::SGD opt(net.parameters(), torch::optim::SGDOptions(0.05));
  // The one-process run over the whole global batch, on rank 0 only.
  std::unique_ptr<manager_t<tequant::single_process>> ref_mgr;
  std::unique_ptr<model<manager_t<tequant::single_process>>> ref_net;
  std::unique_ptr<torch::optim::SGD> ref_opt;
  if (rank == 0) {
    ref_mgr = std::make_unique<manager_t<tequant::single_process>>(params);
    ref_net = std::make_unique<model<manager_t<tequant::single_process>>>(*ref_mgr);
    ref_opt = std::make_unique<torch::optim::SGD>(ref_net->parameters(), torch::optim::SGDOptions(0.05));
  }

  const std::int64_t rows = global_batch / ranks, begin = rank * rows;
  bool ok = true;
  double worst = 0.0;
  int same_as_one_rank = 0;  // steps after which the state equals the one-process run's bit for bit
  float first = 0.0f, last = 0.0f;
  for (int step = 0; step < steps; ++step) {
    const auto [x, y] = batch(step);
    const auto before = mgr.stats();
    const float local = train_step(mgr, net, opt, x.narrow(0, begin, rows), y.narrow(0, begin, rows), pg.get());
    const auto after = mgr.stats();
    const bool once = after.forward_updates == before.forward_updates + 1 &&
                      after.backward_updates == before.backward_updates + 1 && !after.pending;

    // Global loss (sum of the ranks' parts), "exactly once" on every rank, and the state checksum's
    // minimum and maximum over the ranks (as two 32-bit halves, exact in int64).
    const std::uint64_t sum = state_checksum(mgr);
    torch::Tensor loss = torch::full({1}, local, torch::kFloat64);
    all_reduce(*pg, loss, c10d::ReduceOp::SUM);
    torch::Tensor hi = torch::tensor({static_cast<std::int64_t>(sum >> 32), static_cast<std::int64_t>(sum & 0xffffffffu),
                                      std::int64_t{once ? 1 : 0}}, torch::kLong);
    torch::Tensor lo = hi.clone();
    all_reduce(*pg, hi, c10d::ReduceOp::MAX);
    all_reduce(*pg, lo, c10d::ReduceOp::MIN);
    const bool same = hi[0].item<std::int64_t>() == lo[0].item<std::int64_t>() &&
                      hi[1].item<std::int64_t>() == lo[1].item<std::int64_t>();
    const bool all_once = lo[2].item<std::int64_t>() == 1;
    ok = ok && same && all_once;
    const auto global = loss.item<double>();
    last = static_cast<float>(global);
    if (step == 0) first = last;

    if (rank == 0) {
      const float ref = train_step(*ref_mgr, *ref_net, *ref_opt, x, y, nullptr);
      const double rel = std::fabs(global - ref) / std::max(1e-12, std::fabs(static_cast<double>(ref)));
      worst = std::max(worst, rel);
      same_as_one_rank += state_checksum(*ref_mgr) == sum;
      if (step % 10 == 0 || step + 1 == steps || !same || !all_once)
        std::printf("step %3d  loss %.6f (1 rank: %.6f, rel. diff %.1e)  scales+histories %s on all %d ranks  "
                    "updates: 1 forward + 1 backward per rank %s  checksum %016llx\n",
                    step, global, static_cast<double>(ref), rel, same ? "identical" : "DIFFER", ranks,
                    all_once ? "yes" : "NO", static_cast<unsigned long long>(sum));
    }
  }
  pg->barrier()->wait();
  if (rank != 0) return ok ? 0 : 1;
  if (!ok) {
    std::fprintf(stderr, "c10d_data_parallel: ranks diverged or a step did not run exactly one update each way\n");
    return 1;
  }
  if (!(worst <= 1e-4)) {
    std::fprintf(stderr, "c10d_data_parallel: the global loss differs from one process by %.2e (relative)\n", worst);
    return 1;
  }
  if (!(last < first)) {
    std::fprintf(stderr, "c10d_data_parallel: the loss did not go down (%g -> %g)\n", static_cast<double>(first),
                 static_cast<double>(last));
    return 1;
  }
  std::printf("ok: %d ranks, %d steps, loss %.5f -> %.5f; every step bit-identical scales and histories on every rank; "
              "largest relative loss difference to one process over the global batch: %.2e; state equal to that "
              "process's bit for bit after %d of %d steps\n",
              ranks, steps, static_cast<double>(first), static_cast<double>(last), worst, same_as_one_rank, steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 2, steps = 50;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--ranks") == 0) ranks = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  if (ranks < 1 || global_batch % ranks != 0 || steps < 2) {
    std::fprintf(stderr, "c10d_data_parallel: --ranks must divide %lld, --steps must be >= 2\n",
                 static_cast<long long>(global_batch));
    return 2;
  }
  if (const auto r = c10d_ranks::spawned_rank(timeout)) {
    try {
      return run_rank(*r, steps);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "c10d_data_parallel, rank %d: %s\n", r->rank, e.what());
      return 1;
    }
  }
  return c10d_ranks::launch(ranks, argv, "c10d_data_parallel", c10d_ranks::store_kind::file, timeout + std::chrono::seconds(10));
}
