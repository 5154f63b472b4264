// SPDX-License-Identifier: Apache-2.0
// Activation recompute for mini::engine that tells tequant about the original forward and the replay.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <tequant/checkpoint/frame.hpp>

#include "autograd.hpp"

namespace mini {

// example-begin checkpoint
/// Reentrant checkpoint (PyTorch's checkpoint(use_reentrant=True), TE's default): the forward runs
/// without building a graph; the backward replays it with gradients on and runs a NESTED backward
/// task through the replayed graph. tequant sees both halves through one checkpoint_frame: the
/// replay casts with exactly the scales of the original forward and records nothing.
template <class Manager>
tensor checkpoint(engine& e, Manager& m, std::function<tensor(const tensor&)> fn, const tensor& x, std::string name) {
  auto frame = std::make_shared<tequant::checkpoint_frame>(std::move(name));
  const bool build_node = e.grad_enabled() && x->requires_grad;
  tensor out;
  {
    // Open the frame before gradients are switched off: the frame snapshots scales only when the
    // checkpoint's output will need a backward.
    auto original = m.checkpoint_forward(*frame, x->requires_grad);
    auto no_grad = e.grad_mode(false);
    auto no_grad_m = m.grad_mode(false);  // the manager follows the engine's grad mode
    out = fn(leaf(x->value));
  }
  if (!build_node) return out;
  const bool fp8 = m.quantization_enabled();  // the replay restores the call site's autocast state
  return e.record(out->value, {x}, "checkpoint:" + frame->name(),
                  [&e, &m, frame, fn = std::move(fn), fp8, saved = x->value](const matrix& g) {
                    const tensor input = leaf(saved, true);
                    tensor y;
                    {
                      auto replay = m.checkpoint_replay(*frame);
                      auto grad_on = e.grad_mode(true);
                      auto grad_on_m = m.grad_mode(true);
                      auto region = m.autocast(fp8);  // no forward update: it is a replay
                      y = fn(input);
                    }
                    e.backward(y, g);  // nested task; tequant's callback stays on the outer task
                    return std::vector<matrix>{input->grad};
                  });
}
// example-end

}  // namespace mini
