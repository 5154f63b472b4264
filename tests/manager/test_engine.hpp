// SPDX-License-Identifier: Apache-2.0
// A small tape-based autograd engine for the manager tests. It behaves like PyTorch's where the
// manager can tell the difference:
//  - every backward() call is a task; tasks nest (a reentrant checkpoint runs a nested backward);
//  - final callbacks are per task, run after its last node, may queue more, and are dropped when the
//    task ends with an exception;
//  - independent branches run in readiness (FIFO) order, not in forward order;
//  - a reentrant checkpoint runs its forward under no_grad and replays + runs a nested backward;
//    a non-reentrant checkpoint drops its saved tensors and replays once, inside the same task,
//    when the first node that needs them runs;
//  - FP8 "linear" modules quantize through the manager (host backend) and request the backward update.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "tequant/checkpoint/frame.hpp"
#include "tequant/manager_types.hpp"
#include "plan_compare.hpp"

namespace tq_test {

using vec = std::vector<float>;

// example-begin task-stack
/// The engine's backward tasks as graph_hooks sees them (not templated, so hooks can point at it).
struct task_stack {
  struct callback {
    void (*fn)(void*);
    void* ctx;
    void (*dropped)(void*) = nullptr;  // called instead of fn when the task fails (drop-notice hooks)
  };
  std::vector<std::vector<callback>> tasks;  // one callback list per running task
  bool can_queue = true;                     // false: an engine without final callbacks
  std::size_t queued = 0;                    // callbacks ever queued (tests count them)
};

/// graph_hooks for the test engine: the required minimum (no task depth, no drop notice).
struct test_hooks {
  task_stack* ts = nullptr;
  bool in_backward() const noexcept { return ts != nullptr && !ts->tasks.empty(); }
  bool queue_callback(void (*fn)(void*), void* ctx) { return queue_callback(fn, nullptr, ctx); }

 protected:
  bool queue_callback(void (*fn)(void*), void (*dropped)(void*), void* ctx) {
    if (!in_backward() || !ts->can_queue) return false;
    ts->tasks.back().push_back({fn, ctx, dropped});
    ++ts->queued;
    return true;
  }
};

/// Full graph_hooks: also the task's nesting depth, a notice when a failed task drops a callback, and
/// whether they point at an engine (what the shipped engine hooks provide).
struct full_test_hooks : test_hooks {
  using test_hooks::queue_callback;
  bool queue_callback(void (*fn)(void*), void (*dropped)(void*), void* ctx) {
    return test_hooks::queue_callback(fn, dropped, ctx);
  }
  std::uint32_t task_depth() const noexcept {
    return ts == nullptr || ts->tasks.empty() ? 0u : static_cast<std::uint32_t>(ts->tasks.size() - 1);
  }
  bool attached() const noexcept { return ts != nullptr; }
};
// example-end task-stack

struct node;
struct value {
  vec data;
  vec grad;  // accumulated for leaves
  bool requires_grad = false;
  std::shared_ptr<node> fn;  // producer; null for leaves
};
using tensor = std::shared_ptr<value>;

struct recompute_region;

/// One backward function with its saved tensors (exactly one output per node).
struct node {
  std::string name;
  std::vector<tensor> inputs;
  std::vector<vec> saved;
  std::function<std::vector<vec>(node&, const vec&)> backward;
  std::shared_ptr<recompute_region> region;  // non-reentrant checkpoint that recomputes `saved`
};

/// A non-reentrant checkpoint: its nodes, and how to recompute their saved tensors.
struct recompute_region {
  std::unique_ptr<tequant::checkpoint_frame> frame;
  std::function<void()> replay;
  std::vector<std::weak_ptr<node>> nodes;  // owned by the graph; the region must not keep it alive
  bool recomputed = false;
};

inline tensor leaf(vec data, bool requires_grad = false) {
  auto t = std::make_shared<value>();
  t->data = std::move(data);
  t->requires_grad = requires_grad;
  return t;
}

template <class Manager>
class engine {
 public:
  engine(Manager& m, task_stack& ts) : m_(m), ts_(ts) {}
  Manager& manager() { return m_; }
  task_stack& tasks() { return ts_; }

  /// Output of an op: a node when gradients are on and some input needs them.
  tensor make(vec data, std::vector<tensor> inputs, std::vector<vec> saved,
              std::function<std::vector<vec>(node&, const vec&)> bw, std::string name) {
    auto out = leaf(std::move(data));
    bool needs = false;
    for (auto& i : inputs) needs = needs || i->requires_grad;
    if (!m_.grad_enabled() || !needs) return out;
    auto n = std::make_shared<node>();
    n->name = std::move(name);
    n->inputs = std::move(inputs);
    n->saved = std::move(saved);
    n->backward = std::move(bw);
    if (!collectors_.empty()) collectors_.back()->push_back(n);
    out->fn = std::move(n);
    out->requires_grad = true;
    return out;
  }

  tensor add(const tensor& a, const tensor& b) {
    vec y(a->data.size());
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = a->data[i] + b->data[i];
    return make(std::move(y), {a, b}, {}, [](node&, const vec& g) { return std::vector<vec>{g, g}; }, "add");
  }

  tensor scale(const tensor& a, float k) {
    vec y(a->data);
    for (auto& v : y) v *= k;
    return make(std::move(y), {a}, {}, [k](node&, const vec& g) {
      vec d(g);
      for (auto& v : d) v *= k;
      return std::vector<vec>{d};
    }, "scale");
  }

  /// Loss: sum of squares / 2 (gradient = x, so gradients carry the activations' magnitudes).
  tensor loss(const tensor& a) {
    float s = 0.0f;
    for (float v : a->data) s += 0.5f * v * v;
    return make({s}, {a}, {a->data}, [](node& n, const vec& g) {
      vec d(n.saved[0]);
      for (auto& v : d) v *= g[0];
      return std::vector<vec>{d};
    }, "loss");
  }

  // example-begin task-run
  /// One backward task from `root` with upstream gradient `grad` (ones for a scalar loss).
  void backward(const tensor& root, vec grad = {}) {
    if (grad.empty()) grad.assign(root->data.size(), 1.0f);
    ts_.tasks.emplace_back();
    std::size_t ran = 0;
    try {
      run_task(root, std::move(grad));
      // Final callbacks: FIFO, may queue more.
      while (ran < ts_.tasks.back().size()) {
        const auto cb = ts_.tasks.back()[ran++];
        cb.fn(cb.ctx);
      }
    } catch (...) {
      // Like PyTorch: a failed task drops the callbacks it has not run (telling drop-notice hooks).
      const auto dropped = std::move(ts_.tasks.back());
      ts_.tasks.pop_back();
      for (std::size_t i = ran; i < dropped.size(); ++i)
        if (dropped[i].dropped != nullptr) dropped[i].dropped(dropped[i].ctx);
      throw;
    }
    ts_.tasks.pop_back();
  }
  // example-end task-run

  /// Reentrant checkpoint (TE's default): forward under no_grad, backward = replay + nested backward.
  tensor checkpoint_reentrant(const std::function<tensor(const tensor&)>& fn, const tensor& x,
                              std::string name = "reentrant") {
    auto frame = std::make_shared<tequant::checkpoint_frame>(std::move(name));
    const bool needs = m_.grad_enabled() && x->requires_grad;
    tensor out;
    {
      auto fg = m_.checkpoint_forward(*frame, x->requires_grad);
      auto ng = m_.grad_mode(false);
      out = fn(leaf(x->data));
    }
    if (!needs) return out;
    const bool fp8 = m_.quantization_enabled();  // TE's ctx.fp8, the call site's state
    auto res = leaf(out->data);
    res->requires_grad = true;
    auto n = std::make_shared<node>();
    n->name = "checkpoint:" + frame->name();
    n->inputs = {x};
    // example-begin reentrant-replay
    n->backward = [this, frame, fn, fp8](node& self, const vec& g) {
      tensor xd = leaf(self.inputs[0]->data, true);
      tensor y;
      {
        auto rg = m_.checkpoint_replay(*frame);
        auto gm = m_.grad_mode(true);
        auto ac = m_.autocast(fp8);
        y = fn(xd);
      }
      backward(y, g);  // nested task
      return std::vector<vec>{xd->grad};
    };
    // example-end reentrant-replay
    if (!collectors_.empty()) collectors_.back()->push_back(n);
    res->fn = std::move(n);
    return res;
  }

  /// Non-reentrant checkpoint: the graph is built normally, its saved tensors are dropped and
  /// recomputed by one replay when the first of its nodes runs in backward (same task).
  tensor checkpoint_nonreentrant(const std::function<tensor(const tensor&)>& fn, const tensor& x,
                                 std::string name = "non-reentrant") {
    auto region = std::make_shared<recompute_region>();
    region->frame = std::make_unique<tequant::checkpoint_frame>(std::move(name));
    tensor out;
    std::vector<std::shared_ptr<node>> built;
    {
      auto fg = m_.checkpoint_forward(*region->frame, x->requires_grad);
      collectors_.push_back(&built);
      try {
        out = fn(x);
      } catch (...) {
        collectors_.pop_back();
        throw;
      }
      collectors_.pop_back();
    }
    if (built.empty()) return out;
    const bool fp8 = m_.quantization_enabled();
    const vec input = x->data;
    const bool input_grad = x->requires_grad;
    recompute_region* r = region.get();
    region->replay = [this, r, fn, fp8, input, input_grad] {
      std::vector<std::shared_ptr<node>> fresh;
      {
        auto rg = m_.checkpoint_replay(*r->frame);
        auto gm = m_.grad_mode(true);
        auto ac = m_.autocast(fp8);
        collectors_.push_back(&fresh);
        try {
          (void)fn(leaf(input, input_grad));
        } catch (...) {
          collectors_.pop_back();
          throw;
        }
        collectors_.pop_back();
      }
      if (fresh.size() != r->nodes.size()) throw std::logic_error("test engine: replay built a different graph");
      for (std::size_t i = 0; i < fresh.size(); ++i)
        if (auto orig = r->nodes[i].lock()) orig->saved = std::move(fresh[i]->saved);
      r->recomputed = true;
    };
    for (auto& n : built) {
      n->saved.clear();
      n->region = region;
      region->nodes.push_back(n);
    }
    return out;
  }

 private:
  void run_task(const tensor& root, vec grad) {
    if (!root->fn) {
      if (root->requires_grad) accumulate(root->grad, grad);
      return;
    }
    // Dependencies among the nodes reachable from the root.
    std::unordered_map<node*, int> deps;
    std::vector<node*> stack{root->fn.get()};
    deps[root->fn.get()] = 0;
    while (!stack.empty()) {
      node* n = stack.back();
      stack.pop_back();
      for (auto& in : n->inputs) {
        if (!in->fn) continue;
        auto [it, fresh] = deps.try_emplace(in->fn.get(), 0);
        ++it->second;
        if (fresh) stack.push_back(in->fn.get());
      }
    }
    std::unordered_map<node*, vec> grads;
    grads[root->fn.get()] = std::move(grad);
    std::vector<node*> ready{root->fn.get()};
    for (std::size_t head = 0; head < ready.size(); ++head) {
      node* n = ready[head];
      if (n->region && !n->region->recomputed) n->region->replay();
      const vec g = std::move(grads[n]);
      const std::vector<vec> gin = n->backward(*n, g);
      for (std::size_t i = 0; i < n->inputs.size(); ++i) {
        const tensor& in = n->inputs[i];
        if (!in->requires_grad) continue;
        if (!in->fn) {
          accumulate(in->grad, gin[i]);
          continue;
        }
        accumulate(grads[in->fn.get()], gin[i]);
        if (--deps[in->fn.get()] == 0) ready.push_back(in->fn.get());
      }
    }
  }

  static void accumulate(vec& into, const vec& g) {
    if (into.empty()) into.assign(g.size(), 0.0f);
    for (std::size_t i = 0; i < g.size(); ++i) into[i] += g[i];
  }

  Manager& m_;
  task_stack& ts_;
  std::vector<std::vector<std::shared_ptr<node>>*> collectors_;
};

/// An FP8 linear layer y = x W^T (x [rows, in], W [out, in]) that quantizes input, weight and output
/// in forward and grad_output, grad_input in backward through the manager, and requests the backward
/// update at the end of its backward.
template <class Manager>
struct fp8_linear {
  Manager* m;
  tequant::module_handle h;
  std::size_t in, out;
  vec w, dw;
  bool delay_wgrad = false;     // backward_dw-style: wgrad registered with the manager, run later
  bool training = true;         // the manager never looks at it (scenario K)
  bool throw_in_backward = false;
  /// How casts get their plans: plan_cast(slot_id), plan_cast(handle), or both (the handle's first),
  /// checked equal field by field, pointers included.
  enum class plan_path { slot_ids, handles, both } path = plan_path::slot_ids;
  // Bound at registration (later registrations make them re-bind at their next cast).
  tequant::forward_cast_handle fh[3];
  tequant::backward_cast_handle bh[2];

  fp8_linear(Manager& mgr, std::string name, std::size_t in_features, std::size_t out_features, float seed)
      : m(&mgr), h(mgr.register_module(std::move(name))), in(in_features), out(out_features),
        w(in_features * out_features), dw(in_features * out_features, 0.0f) {
    for (std::size_t i = 0; i < w.size(); ++i)
      w[i] = seed * static_cast<float>(static_cast<int>((i * 7 + 3) % 11) - 5) / 8.0f;
    for (std::uint8_t r = 0; r < 3; ++r) fh[r] = mgr.bind(h, static_cast<tequant::forward_role>(r));
    for (std::uint8_t r = 0; r < 2; ++r) bh[r] = mgr.bind(h, static_cast<tequant::backward_role>(r));
  }

  template <class Handle>
  tequant::cast_plan plan(Handle& handle) {
    if (path == plan_path::slot_ids) return m->plan_cast(handle.slot());
    const tequant::cast_plan p = m->plan_cast(handle);
    if (path == plan_path::both) {
      const tequant::cast_plan q = m->plan_cast(handle.slot());
      tequant_test::check_same_plan(p, q);
    }
    return p;
  }

  /// Quantize-dequantize through the manager's plan for `handle`'s slot (the host backend does the cast).
  template <class Handle>
  vec cast(Handle& handle, const vec& x) {
    const tequant::cast_plan p = plan(handle);
    std::vector<std::uint8_t> q(x.size());
    float scale_inv = 1.0f;
    auto& be = m->backend();
    if (p.scale != nullptr)
      be.quantize_tensor(x.data(), x.size(), p.scale, p.dtype, q.data(), &scale_inv, p.amax);
    else
      be.quantize_current(x.data(), x.size(), p.dtype, false, 0.0f, q.data(), &scale_inv);
    vec r(x.size());
    be.dequantize_tensor(q.data(), q.size(), p.dtype, &scale_inv, r.data());
    return r;
  }

  tensor operator()(engine<Manager>& e, const tensor& x) {
    using tequant::backward_role;
    using tequant::forward_role;
    const std::size_t rows = x->data.size() / in;
    const bool fp8 = m->quantization_enabled();
    const tequant::backward_ticket ticket = m->module_forward(h, m->grad_enabled() && x->requires_grad);
    const vec xq = fp8 ? cast(fh[0], x->data) : x->data;
    const vec wq = fp8 ? cast(fh[1], w) : w;
    vec y(rows * out, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < out; ++o) {
        float s = 0.0f;
        for (std::size_t i = 0; i < in; ++i) s += xq[r * in + i] * wq[o * in + i];
        y[r * out + o] = s;
      }
    if (fp8) y = cast(fh[2], y);
    auto bw = [this, rows, fp8, ticket](node& n, const vec& g) {
      if (throw_in_backward) throw std::runtime_error("test: backward of '" + m->module_name(h) + "' failed");
      const vec& xs = n.saved.at(0);
      const vec& ws = n.saved.at(1);
      const vec gq = fp8 ? cast(bh[0], g) : g;
      vec dx(rows * in, 0.0f);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t o = 0; o < out; ++o)
          for (std::size_t i = 0; i < in; ++i) dx[r * in + i] += gq[r * out + o] * ws[o * in + i];
      if (fp8) dx = cast(bh[1], dx);
      auto wgrad = [this, rows, gq, xs] {
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t o = 0; o < out; ++o)
            for (std::size_t i = 0; i < in; ++i) dw[o * in + i] += gq[r * out + o] * xs[r * in + i];
      };
      if (delay_wgrad)
        m->defer_weight_grad(wgrad);
      else
        wgrad();
      if (fp8) m->request_backward_update(ticket);
      return std::vector<vec>{dx};
    };
    return e.make(std::move(y), {x}, {xq, wq}, std::move(bw), m->module_name(h));
  }

  void sgd(float lr) {
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * dw[i];
    std::fill(dw.begin(), dw.end(), 0.0f);
  }
};

}  // namespace tq_test
