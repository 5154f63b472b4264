// SPDX-License-Identifier: Apache-2.0
// graph_hooks for your own autograd engine, in the fewest lines. tequant asks an engine two things:
// "is this thread inside a backward task?" and "run this once when the current task ends". With
// them, engine_callback flushes the backward update exactly once per logical backward, however many
// nested backward tasks (reentrant checkpoints) run inside it.
// The "engine" here is a stand-in: a backward task is a list of node functions plus final callbacks.
#include <tequant/boundary/engine_callback.hpp>
#include <tequant/backend/host.hpp>
#include <tequant/manager.hpp>
#include <tequant/recipe/delayed.hpp>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <vector>

// example-begin my_engine
/// Your engine: what matters is that it knows which backward task is running and can run callbacks
/// after a task's last node (PyTorch: Engine::queue_callback).
struct my_engine {
  struct task {
    std::vector<void (*)(void*)> fns;
    std::vector<void*> ctxs;
  };
  std::vector<task> running;  // innermost task last

  void backward(const std::vector<std::function<void()>>& nodes) {
    running.emplace_back();
    for (const auto& n : nodes) n();  // a node may call backward() again: a nested task
    task done = std::move(running.back());
    running.pop_back();
    for (std::size_t i = 0; i < done.fns.size(); ++i) done.fns[i](done.ctxs[i]);
  }
};

/// The adapter tequant::engine_callback<Hooks> needs (concept tequant::graph_hooks).
struct my_hooks {
  my_engine* e;
  // Inside ANY backward task of the engine, nested ones included.
  bool in_backward() const noexcept { return !e->running.empty(); }
  // Queue on the CURRENT task (the manager makes sure that is the outermost one); return false when
  // you cannot, and the manager falls back to flushing at the next top-level autocast entry.
  bool queue_callback(void (*fn)(void*), void* ctx) {
    if (e->running.empty()) return false;
    e->running.back().fns.push_back(fn);
    e->running.back().ctxs.push_back(ctx);
    return true;
  }
};
static_assert(tequant::graph_hooks<my_hooks>);
// example-end

int main() {
  // example-begin manager_with_hooks
  my_engine engine;
  using manager_type = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::engine_callback<my_hooks>>;
  manager_type m({}, tequant::engine_callback<my_hooks>{my_hooks{&engine}});
  const tequant::module_handle layer = m.register_module("layer");
  // example-end

  // A module backward: cast the incoming gradient with the slot's scale (recording its amax), then
  // request the update. It never flushes by itself.
  std::vector<float> grad(256, 0.01f);
  std::vector<std::uint8_t> q(grad.size());
  auto module_backward = [&] {
    const tequant::cast_plan p = m.plan_cast(m.slot(layer, tequant::backward_role::grad_output));
    float scale_inv = 0.0f;
    m.backend().quantize_tensor(grad.data(), grad.size(), p.scale, p.dtype, q.data(), &scale_inv, p.amax);
    m.request_backward_update();
  };

  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    std::printf("%-68s %s\n", what, ok ? "ok" : "FAILED");
    failures += ok ? 0 : 1;
  };

  // One logical backward with a nested backward task in the middle (what a reentrant checkpoint does).
  engine.backward({module_backward, [&] {
                     engine.backward({module_backward});
                     check(m.stats().backward_updates == 0, "nested task ended: no update yet (it is not the outermost)");
                   },
                   module_backward});
  check(m.stats().backward_updates == 1, "outer task ended: exactly one backward update");
  check(!m.stats().pending, "nothing pending afterwards");
  const float committed = m.scale(m.slot(layer, tequant::backward_role::grad_output));
  check(committed == tequant::fp8_max(tequant::fp8_dtype::e5m2) / 0.01f,
        "the update committed the amax: scale = 57344 / 0.01 (hybrid: E5M2 gradients)");

  // An engine that cannot queue here (queue_callback returns false) loses nothing: the update runs at
  // the next top-level autocast entry instead.
  module_backward();  // a request outside any backward task
  check(m.stats().pending && m.stats().backward_updates == 1, "request outside a task: pending, not flushed");
  { auto region = m.autocast(); }
  check(m.stats().backward_updates == 2 && !m.stats().pending, "flushed at the next top-level autocast entry");
  return failures == 0 ? 0 : 1;
}
