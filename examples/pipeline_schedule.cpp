// SPDX-License-Identifier: Apache-2.0
// A pipeline-style schedule: one logical backward made of several backward calls (one per stage and
// micro-batch) plus weight-gradient work deferred to the end (zero-bubble "backward_dw"). Wrapped in
// one manager.backward_scope(), it gets exactly one backward update, after the deferred work, whatever
// the boundary policy (here engine_callback, whose per-task callbacks would otherwise fire once per
// backward call).
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <tequant/boundary/engine_callback.hpp>
#include <tequant/backend/host.hpp>
#include <tequant/manager.hpp>
#include <tequant/recipe/delayed.hpp>

#include "engine/autograd.hpp"
#include "engine/fp8_linear.hpp"
#include "engine/hooks.hpp"
#include "engine/ops.hpp"

using manager_type = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::engine_callback<mini::hooks>>;
using linear = mini::fp8_linear<manager_type>;

int main() {
  constexpr int stages = 2, micro_batches = 4, steps = 3;
  constexpr std::size_t rows = 32, width = 64;
  mini::engine e;
  manager_type m({}, tequant::engine_callback<mini::hooks>{mini::hooks{&e}});
  std::mt19937 rng(7);
  std::vector<linear> stage;  // one FP8 linear per pipeline stage
  stage.reserve(stages);      // nodes point at their layer: no reallocation
  for (int s = 0; s < stages; ++s) stage.emplace_back(m, "stage" + std::to_string(s), width, width, rng);
  for (auto& l : stage) l.defer_wgrad = true;  // dW is computed later, in run_deferred_weight_grads()

  std::normal_distribution<float> normal(0.0f, 1.0f);
  int failures = 0;
  std::printf("%-6s %16s %18s %12s %10s\n", "step", "backward calls", "deferred dW items", "fwd updates", "bwd updates");
  for (int step = 0; step < steps; ++step) {
    const auto before = m.stats();
    // Forward of every micro-batch, stage by stage; a stage boundary is a detached leaf, as between
    // two pipeline ranks (the activation is sent, its gradient comes back).
    std::vector<mini::tensor> stage_in[stages], stage_out[stages];
    std::vector<mini::tensor> losses;
    {
      auto region = m.autocast();  // one forward update when it exits
      for (int mb = 0; mb < micro_batches; ++mb) {
        mini::matrix x(rows, width);
        for (float& v : x.data) v = normal(rng);
        mini::tensor h = mini::leaf(x);
        for (int s = 0; s < stages; ++s) {
          stage_in[s].push_back(s == 0 ? h : mini::leaf(h->value, /*requires_grad=*/true));
          h = mini::gelu(e, stage[s](e, stage_in[s].back()));
          stage_out[s].push_back(h);
        }
        losses.push_back(mini::mse_loss(e, h, mini::matrix(rows, width)));
      }
    }
    // example-begin pipeline_backward
    int backward_calls = 0;
    std::size_t deferred = 0;
    {
      auto scope = m.backward_scope();  // everything until its exit is ONE logical backward
      for (int mb = 0; mb < micro_batches; ++mb) {
        e.backward(losses[mb]);  // last stage: one backward task per micro-batch
        ++backward_calls;
        for (int s = stages - 2; s >= 0; --s) {  // earlier stages: the gradient sent back by stage s+1
          e.backward(stage_out[s][mb], stage_in[s + 1][mb]->grad);
          ++backward_calls;
        }
      }
      deferred = m.deferred_weight_grads();
      m.run_deferred_weight_grads();  // backward_dw: inside the scope, before the update
    }  // the one backward update runs here
    // example-end
    const auto after = m.stats();
    std::printf("%-6d %16d %18zu %12llu %10llu\n", step, backward_calls, deferred,
                (unsigned long long)(after.forward_updates - before.forward_updates),
                (unsigned long long)(after.backward_updates - before.backward_updates));
    failures += after.forward_updates - before.forward_updates != 1;
    failures += after.backward_updates - before.backward_updates != 1;
    failures += after.pending || deferred != std::size_t(stages * micro_batches) || m.deferred_weight_grads() != 0;
    for (auto& l : stage) {
      failures += l.weight->grad.empty();  // the deferred work did produce every weight gradient
      l.weight->grad = {};                 // (an optimizer step would go here)
    }
  }
  std::printf("%s\n", failures == 0 ? "ok: one forward and one backward update per step"
                                    : "FAILED: expected one forward and one backward update per step");
  return failures == 0 ? 0 : 1;
}
