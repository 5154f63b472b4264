// SPDX-License-Identifier: Apache-2.0
// A deliberately small graph-based autograd engine for the examples: matrices, a graph of nodes built
// by the forward, and backward "tasks" with final callbacks. It knows nothing about FP8; tequant
// plugs into it through graph_hooks (hooks.hpp). It behaves like PyTorch's engine where tequant can
// tell the difference:
//  - every backward() call is one task; a backward() called from inside a node (a reentrant
//    checkpoint) is a nested task;
//  - a task may queue final callbacks; they run once, after the task's last node, and are dropped
//    when the task fails with an exception;
//  - nodes run as soon as all of their consumers have delivered a gradient (readiness order).
#pragma once
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace mini {

/// A row-major matrix of floats (a batch of rows).
struct matrix {
  std::size_t rows = 0, cols = 0;
  std::vector<float> data;

  matrix() = default;
  matrix(std::size_t r, std::size_t c, float fill = 0.0f) : rows(r), cols(c), data(r * c, fill) {}
  float& operator()(std::size_t r, std::size_t c) { return data[r * cols + c]; }
  float operator()(std::size_t r, std::size_t c) const { return data[r * cols + c]; }
  std::size_t size() const { return data.size(); }
  bool empty() const { return data.empty(); }
};

struct node;

/// A value in the graph: leaves (inputs, parameters) have no grad_fn; parameters collect `grad`.
struct tensor_data {
  matrix value;
  matrix grad;
  bool requires_grad = false;
  std::shared_ptr<node> grad_fn;
};
using tensor = std::shared_ptr<tensor_data>;

inline tensor leaf(matrix value, bool requires_grad = false) {
  auto t = std::make_shared<tensor_data>();
  t->value = std::move(value);
  t->requires_grad = requires_grad;
  return t;
}

/// One backward function. It receives the gradient of its output and returns one gradient per input
/// (an empty matrix: "no gradient for this input", e.g. a weight gradient computed later).
struct node {
  std::string name;
  std::vector<tensor> inputs;
  std::function<std::vector<matrix>(const matrix& grad_output)> backward;
};

class engine {
 public:
  engine() = default;
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // ---- grad mode (what torch.is_grad_enabled() is in PyTorch) -----------------------------------
  bool grad_enabled() const { return grad_enabled_; }
  class grad_mode_guard {
   public:
    grad_mode_guard(engine& e, bool enabled) : e_(e), prev_(e.grad_enabled_) { e.grad_enabled_ = enabled; }
    ~grad_mode_guard() { e_.grad_enabled_ = prev_; }
    grad_mode_guard(const grad_mode_guard&) = delete;
    grad_mode_guard& operator=(const grad_mode_guard&) = delete;

   private:
    engine& e_;
    bool prev_;
  };
  [[nodiscard]] grad_mode_guard grad_mode(bool enabled) { return grad_mode_guard(*this, enabled); }

  /// The result of an op: records a node when gradients are on and some input needs them.
  tensor record(matrix value, std::vector<tensor> inputs, std::string name,
                std::function<std::vector<matrix>(const matrix&)> backward) {
    auto out = leaf(std::move(value));
    bool needs_grad = false;
    for (const auto& in : inputs) needs_grad = needs_grad || in->requires_grad;
    if (!grad_enabled_ || !needs_grad) return out;
    out->requires_grad = true;
    out->grad_fn = std::make_shared<node>(node{std::move(name), std::move(inputs), std::move(backward)});
    return out;
  }

  // ---- backward tasks ----------------------------------------------------------------------------

  /// One backward task from `root` (seed gradient: ones, for a scalar loss).
  void backward(const tensor& root, matrix seed = {}) {
    if (seed.empty()) seed = matrix(root->value.rows, root->value.cols, 1.0f);
    tasks_.emplace_back();
    std::size_t ran = 0;
    try {
      run_nodes(root, std::move(seed));
      // Final callbacks run after the last node, in queue order; a callback may queue another.
      while (ran < tasks_.back().size()) {
        const callback cb = tasks_.back()[ran++];
        cb.fn(cb.ctx);
      }
    } catch (...) {
      // As in PyTorch: a failed task drops the callbacks it has not run; here their owners hear of it.
      const std::vector<callback> dropped = std::move(tasks_.back());
      tasks_.pop_back();
      for (std::size_t i = ran; i < dropped.size(); ++i)
        if (dropped[i].dropped != nullptr) dropped[i].dropped(dropped[i].ctx);
      throw;
    }
    tasks_.pop_back();
  }

  /// True while any backward task runs (graph_hooks::in_backward).
  bool in_backward() const { return !tasks_.empty(); }
  /// Number of tasks running now (2 inside the nested backward of a reentrant checkpoint).
  std::size_t task_depth() const { return tasks_.size(); }

  /// Runs fn(ctx) once when the CURRENT (innermost) task ends, or dropped(ctx) (when not null) if the
  /// task fails first (graph_hooks::queue_callback).
  bool queue_final_callback(void (*fn)(void*), void (*dropped)(void*), void* ctx) {
    if (tasks_.empty()) return false;
    tasks_.back().push_back({fn, dropped, ctx});
    ++callbacks_queued_;
    return true;
  }
  std::size_t callbacks_queued() const { return callbacks_queued_; }

 private:
  struct callback {
    void (*fn)(void*);
    void (*dropped)(void*);
    void* ctx;
  };

  void run_nodes(const tensor& root, matrix seed) {
    if (!root->grad_fn) {
      if (root->requires_grad) accumulate(root->grad, seed);
      return;
    }
    // How many consumers each reachable node waits for.
    std::unordered_map<node*, int> pending;
    std::vector<node*> stack{root->grad_fn.get()};
    pending[root->grad_fn.get()] = 0;
    while (!stack.empty()) {
      node* n = stack.back();
      stack.pop_back();
      for (const auto& in : n->inputs) {
        if (!in->grad_fn) continue;
        auto [it, first_visit] = pending.try_emplace(in->grad_fn.get(), 0);
        ++it->second;
        if (first_visit) stack.push_back(in->grad_fn.get());
      }
    }
    std::unordered_map<node*, matrix> grads;
    grads[root->grad_fn.get()] = std::move(seed);
    std::vector<node*> ready{root->grad_fn.get()};
    for (std::size_t head = 0; head < ready.size(); ++head) {
      node* n = ready[head];
      const matrix g = std::move(grads[n]);
      grads.erase(n);
      const std::vector<matrix> input_grads = n->backward(g);
      for (std::size_t i = 0; i < n->inputs.size(); ++i) {
        const tensor& in = n->inputs[i];
        if (!in->requires_grad) continue;
        if (!in->grad_fn) {
          if (!input_grads[i].empty()) accumulate(in->grad, input_grads[i]);
          continue;
        }
        if (!input_grads[i].empty()) accumulate(grads[in->grad_fn.get()], input_grads[i]);
        if (--pending[in->grad_fn.get()] == 0) ready.push_back(in->grad_fn.get());
      }
    }
  }

  static void accumulate(matrix& into, const matrix& g) {
    if (into.empty()) into = matrix(g.rows, g.cols);
    for (std::size_t i = 0; i < g.size(); ++i) into.data[i] += g.data[i];
  }

  bool grad_enabled_ = true;
  std::vector<std::vector<callback>> tasks_;  // one list of final callbacks per running task
  std::size_t callbacks_queued_ = 0;
};

}  // namespace mini
