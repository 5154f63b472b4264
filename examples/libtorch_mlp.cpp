// SPDX-License-Identifier: Apache-2.0
// A small libtorch model trained with tequant FP8: delayed scaling, the backward update flushed once
// per backward by a final callback on libtorch's autograd engine, the middle blocks recomputed by
// activation checkpoints (one reentrant, one in the same backward task).
//
//   libtorch_mlp [--steps N]      prints the loss and the updates of every few steps
#include "tequant/integration/libtorch.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tequant/boundary/engine_callback.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

using manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::engine_callback<tequant::libtorch_hooks>>;
using layer = tequant::quantized_linear<manager>;
using tensors = torch::autograd::variable_list;

struct model : torch::nn::Module {
  explicit model(manager& mgr) : mgr(mgr) {
    for (int i = 0; i < 4; ++i)
      layers.push_back(register_module("fc" + std::to_string(i),
                                       std::make_shared<layer>(mgr, "fc" + std::to_string(i), i == 0 ? 16 : 64,
                                                               i == 3 ? 1 : 64)));
  }
  torch::Tensor block(std::size_t i, const torch::Tensor& x) { return torch::gelu(layers[i]->forward(x)); }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = block(0, x);
    h = tequant::checkpoint(mgr, [this](const tensors& v) { return tensors{block(1, v[0])}; }, {h},
                            tequant::checkpoint_mode::reentrant, "block1")[0];
    h = tequant::checkpoint(mgr, [this](const tensors& v) { return tensors{block(2, v[0])}; }, {h},
                            tequant::checkpoint_mode::same_task, "block2")[0];
    return layers[3]->forward(h);
  }
  manager& mgr;
  std::vector<std::shared_ptr<layer>> layers;
};

int main(int argc, char** argv) {
  int steps = 60;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  if (steps < 2) {
    std::fprintf(stderr, "libtorch_mlp: --steps must be >= 2\n");
    return 2;
  }
  torch::manual_seed(0);
  manager mgr(tequant::delayed_params{.format = tequant::fp8_format::hybrid, .history_length = 16});
  model net(mgr);
  torch::optim::Adam opt(net.parameters(), torch::optim::AdamOptions(3e-3));

  // regression target: a fixed smooth function of 16 features
  const torch::Tensor x = torch::randn({256, 16});
  const torch::Tensor y = torch::sin(x.narrow(1, 0, 4).sum(1, true)) + 0.1 * x.narrow(1, 4, 1);

  float first = 0.0f, last = 0.0f;
  bool ok = true;
  for (int step = 0; step < steps; ++step) {
    const auto before = mgr.stats();
    opt.zero_grad();
    torch::Tensor loss;
    {
      tequant::libtorch_autocast<manager> fp8(mgr);  // the forward update runs at its exit
      loss = torch::mse_loss(net.forward(x), y);
    }
    loss.backward();  // one backward update, flushed when the engine's task ends
    opt.step();
    const auto after = mgr.stats();
    const auto fwd = after.forward_updates - before.forward_updates;
    const auto bwd = after.backward_updates - before.backward_updates;
    ok = ok && fwd == 1 && bwd == 1 && !after.pending && after.outstanding_snapshots == 0;
    last = loss.item<float>();
    if (step == 0) first = last;
    if (step % 5 == 0 || step + 1 == steps)
      std::printf("step %3d  loss %.5f  updates this step: forward %llu backward %llu  input scale of fc1 %.4g\n", step,
                  static_cast<double>(last), static_cast<unsigned long long>(fwd), static_cast<unsigned long long>(bwd),
                  static_cast<double>(mgr.scale(mgr.slot(net.layers[1]->handle(), tequant::forward_role::input))));
  }
  if (!ok) {
    std::fprintf(stderr, "libtorch_mlp: a step did not run exactly one forward and one backward update\n");
    return 1;
  }
  if (!(last < first)) {
    std::fprintf(stderr, "libtorch_mlp: the loss did not go down (%g -> %g)\n", static_cast<double>(first),
                 static_cast<double>(last));
    return 1;
  }
  std::printf("ok: loss %.5f -> %.5f, one forward and one backward update per step\n", static_cast<double>(first),
              static_cast<double>(last));
  return 0;
}
