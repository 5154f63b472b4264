// SPDX-License-Identifier: Apache-2.0
// libtorch (PyTorch C++ API) integration: graph hooks for its autograd engine, a quantized linear layer
// (fake quantization on CPU float tensors with any recipe's cast plan: FP8 or NVFP4) and activation
// checkpoints that drive tequant's frames.
#pragma once
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/graph_task.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <span>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/backend/layouts.hpp"
#include "tequant/boundary/concepts.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/error.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/quantized_tensor.hpp"

namespace tequant {

// ---- graph hooks ------------------------------------------------------------------------------------

/// graph_hooks for libtorch's autograd engine. "Inside a backward task" is libtorch's thread-local
/// current GraphTask, read through the exported `get_current_graph_task_exec_info()` (nullptr outside
/// any task); a final callback goes to the current task through `Engine::queue_callback`, which in a
/// nested backward() is the inner task. The optional members: the task's depth is the GraphTask's
/// reentrant_depth_ (0 for a backward() called outside any task), so a nested backward() run by a
/// custom op never flushes by itself; a callback that a failed task discards tells the manager when
/// the task lets go of it (the drop notice), so a retried backward flushes at its own end.
struct libtorch_hooks {
  bool in_backward() const noexcept { return torch::autograd::get_current_graph_task_exec_info() != nullptr; }

  std::uint32_t task_depth() const noexcept {
    const auto* info = torch::autograd::get_current_graph_task_exec_info();
    if (info == nullptr) return 0;
    // The exported accessor returns &GraphTask::exec_info_ of the current task; GraphTask is declared
    // in graph_task.h, so its reentrant depth is read from the same object.
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winvalid-offsetof"
#endif
    constexpr std::size_t offset = offsetof(torch::autograd::GraphTask, exec_info_);
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif
    const auto* task =
        reinterpret_cast<const torch::autograd::GraphTask*>(reinterpret_cast<const char*>(info) - offset);
    return task->reentrant_depth_ > 0 ? static_cast<std::uint32_t>(task->reentrant_depth_) : 0u;
  }

  bool queue_callback(void (*fn)(void*), void* ctx) const noexcept { return queue_callback(fn, nullptr, ctx); }

  bool queue_callback(void (*fn)(void*), void (*dropped)(void*), void* ctx) const noexcept {
    if (!in_backward()) return false;  // queue_callback would throw "only during backward pass"
    // The engine keeps the std::function until the GraphTask dies; a task that failed never ran it,
    // and the notice fires when the function is destroyed unrun.
    struct notice {
      void (*dropped)(void*) = nullptr;
      void* ctx = nullptr;
      bool ran = false;
      ~notice() {
        if (!ran && dropped != nullptr) dropped(ctx);
      }
    };
    try {
      auto n = std::make_shared<notice>();
      n->dropped = dropped;
      n->ctx = ctx;
      torch::autograd::Engine::get_default_engine().queue_callback([fn, ctx, n] {
        n->ran = true;
        fn(ctx);
      });
      return true;
    } catch (...) {
      return false;
    }
  }
};

static_assert(graph_hooks<libtorch_hooks> && hooks_with_task_depth<libtorch_hooks> &&
              hooks_with_drop_notice<libtorch_hooks>);

/// An autocast region that first tells the manager libtorch's grad mode, so the forward update at
/// the outermost exit follows torch::GradMode as TE's follows torch.is_grad_enabled().
template <class Manager>
class [[nodiscard]] libtorch_autocast {
 public:
  explicit libtorch_autocast(Manager& mgr, bool enabled = true)
      : grad_(mgr.grad_mode(torch::GradMode::is_enabled())), region_(mgr.autocast(enabled)) {}
  libtorch_autocast(const libtorch_autocast&) = delete;
  libtorch_autocast& operator=(const libtorch_autocast&) = delete;

 private:
  typename Manager::grad_mode_guard grad_;     // restored after the region's exit
  typename Manager::autocast_region region_;
};

// ---- CPU RNG state (what a checkpoint replay must see) ------------------------------------------

namespace detail {

inline at::Tensor cpu_rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

inline void set_cpu_rng_state(const at::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

/// Restores the CPU RNG state it saw at construction (the caller's stream continues untouched).
class rng_fork {
 public:
  rng_fork() : saved_(cpu_rng_state()) {}
  rng_fork(const rng_fork&) = delete;
  rng_fork& operator=(const rng_fork&) = delete;
  ~rng_fork() { set_cpu_rng_state(saved_); }

 private:
  at::Tensor saved_;
};

}  // namespace detail

// ---- fake quantization (quantize, then dequantize, on the host) ----------------------------------

/// Rowwise: blocks run along the last dim (the GEMM that contracts over it); columnwise: along the
/// flattened leading dims (the GEMM that contracts over those, e.g. wgrad).
enum class block_axis : std::uint8_t { rowwise, columnwise };

namespace detail {

/// The fake-quantized matrices of one cast: the rowwise and/or columnwise one, as requested.
struct fake_quantized {
  torch::Tensor rowwise, columnwise;
};

/// Casts x2d [M, K] with host_backend as the plan says (its scaling mode, scale, amax sink and tiles:
/// whatever recipe made it), then decodes each requested direction back to a [M, K] float tensor.
/// Per-tensor modes give one tensor for both directions (the same values).
inline fake_quantized fake_quantize_dirs(const cast_plan& plan, const torch::Tensor& x2d, bool row, bool col) {
  detail::require(x2d.dim() == 2 && x2d.scalar_type() == torch::kFloat && x2d.device().is_cpu() &&
                      x2d.is_contiguous(),
                  "fake_quantize: expects a contiguous 2-D CPU float32 tensor, got ", x2d.dim(), "-D ",
                  std::string(c10::toString(x2d.scalar_type())));
  fake_quantized r;
  if (!row && !col) return r;  // a backward that needs neither dgrad nor wgrad
  const host_backend be{};
  const auto M = static_cast<std::size_t>(x2d.size(0));
  const auto K = static_cast<std::size_t>(x2d.size(1));
  quantized_tensor<host_backend> q;
  q.prepare(be, plan, M, K, row, col);
  be.quantize(matrix_view<const float>{x2d.data_ptr<float>(), M, K}, plan, q.output());
  auto decode = [&](bool columnwise) {
    torch::Tensor out = torch::empty_like(x2d);
    be.dequantize(plan, M, K, q.output(), columnwise,
                  std::span<float>(out.data_ptr<float>(), static_cast<std::size_t>(out.numel())));
    return out;
  };
  if (!q.has_columnwise()) {  // shared directions, or only rowwise asked for
    r.rowwise = decode(false);
    if (col) r.columnwise = r.rowwise;
    if (!row) r.rowwise = torch::Tensor();
    return r;
  }
  if (row) r.rowwise = decode(false);
  r.columnwise = decode(true);
  return r;
}

}  // namespace detail

/// Fake-quantizes a contiguous CPU float matrix [rows, cols] as `plan` says (the plan the manager's
/// plan_cast() gave: per-tensor modes cast with *plan.scale or the tensor's own amax and max-accumulate
/// into plan.amax; MXFP8 and block modes use their blocks along `axis`). No recipe is named: a recipe
/// of your own works as soon as its plan does.
inline torch::Tensor fake_quantize(const cast_plan& plan, const torch::Tensor& x2d, block_axis axis) {
  const bool row = axis == block_axis::rowwise;
  auto r = detail::fake_quantize_dirs(plan, x2d, row, !row);
  return row ? std::move(r.rowwise) : std::move(r.columnwise);
}

namespace detail {

/// A torch::CustomClassHolder carried through AutogradContext::saved_data as a capsule.
template <class T>
c10::intrusive_ptr<T> from_capsule(const c10::IValue& v) {
  return c10::static_intrusive_pointer_cast<T>(v.toCapsule());
}

}  // namespace detail

// ---- the quantized linear layer ---------------------------------------------------------------------

template <class Manager>
struct quantized_linear_function;

/// y = x W^T + b with x, W (forward) and dy (backward) fake-quantized through the manager's recipe:
/// each cast is the plan plan_cast() gives (FP8 per-tensor, MXFP8, block or NVFP4, stochastic rounding
/// included), decoded back to float before torch's GEMM. One registered module with one GEMM; slots
/// input/weight (forward) and grad_output (backward). NVFP4 needs an even in_features, out_features and
/// token count (its 1x16 blocks pack two codes a byte).
template <class Manager>
class quantized_linear : public torch::nn::Module {
 public:
  quantized_linear(Manager& mgr, std::string name, std::int64_t in_features, std::int64_t out_features,
                   bool bias = true)
      : mgr_(&mgr), handle_(mgr.register_module(name, 1)) {
    detail::require(in_features > 0 && out_features > 0, "quantized_linear '", name,
                    "': features must be positive, got ", in_features, "x", out_features);
    weight = register_parameter("weight", torch::empty({out_features, in_features}));
    if (bias) this->bias = register_parameter("bias", torch::empty({out_features}));
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    torch::NoGradGuard no_grad;
    weight.uniform_(-bound, bound);
    if (bias) this->bias.uniform_(-bound, bound);
  }

  torch::Tensor forward(const torch::Tensor& x) {
    detail::require(x.dim() >= 1 && x.size(-1) == weight.size(1), "quantized_linear: input's last dim ",
                    x.dim() >= 1 ? x.size(-1) : 0, " does not match in_features ", weight.size(1));
    const bool needs_backward = torch::GradMode::is_enabled() &&
                                (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
    return quantized_linear_function<Manager>::apply(x, weight, bias, mgr_, handle_.index, needs_backward);
  }

  module_handle handle() const noexcept { return handle_; }

  torch::Tensor weight;
  torch::Tensor bias;

 private:
  Manager* mgr_;
  module_handle handle_;
};

template <class Manager>
struct quantized_linear_function : torch::autograd::Function<quantized_linear_function<Manager>> {

  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               const torch::Tensor& b, Manager* mgr, std::uint32_t module, bool needs_backward) {
    const module_handle h{module};
    const backward_ticket ticket = mgr->module_forward(h, needs_backward);
    const bool fp8 = mgr->quantization_enabled();  // TE's ctx.fp8: outside an enabled region, FP32
    const torch::Tensor x2d = x.reshape({-1, x.size(-1)}).contiguous();
    const torch::Tensor w2d = w.contiguous();
    // wgrad contracts over tokens and dgrad over out_features: their casts (columnwise) block the
    // other axis; one host cast makes both directions (per-tensor recipes: the same values)
    detail::fake_quantized xq{x2d, x2d}, wq{w2d, w2d};
    if (fp8) {
      xq = detail::fake_quantize_dirs(mgr->plan_cast(mgr->slot(h, forward_role::input)), x2d, true, needs_backward);
      wq = detail::fake_quantize_dirs(mgr->plan_cast(mgr->slot(h, forward_role::weight)), w2d, true, needs_backward);
    }
    torch::Tensor y = b.defined() ? torch::addmm(b, xq.rowwise, wq.rowwise.t()) : xq.rowwise.matmul(wq.rowwise.t());
    if (needs_backward) {
      ctx->save_for_backward({xq.columnwise, wq.columnwise});
      ctx->saved_data["mgr"] = static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(mgr));
      ctx->saved_data["module"] = static_cast<std::int64_t>(module);
      ctx->saved_data["owner"] = ticket.owner;
      ctx->saved_data["fp8"] = fp8;
      ctx->saved_data["has_bias"] = b.defined();
      ctx->saved_data["x_sizes"] = x.sizes();
    }
    auto out_sizes = x.sizes().vec();
    out_sizes.back() = w.size(0);
    return y.reshape(out_sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* mgr = reinterpret_cast<Manager*>(static_cast<std::intptr_t>(ctx->saved_data["mgr"].toInt()));
    const module_handle h{static_cast<std::uint32_t>(ctx->saved_data["module"].toInt())};
    const backward_ticket ticket{ctx->saved_data["owner"].toBool()};
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& xc = saved[0];
    const torch::Tensor& wc = saved[1];
    const bool fp8 = ctx->saved_data["fp8"].toBool();
    const torch::Tensor g2d = grads[0].reshape({-1, wc.size(0)}).contiguous();
    detail::fake_quantized gq{g2d, g2d};
    if (fp8)
      gq = detail::fake_quantize_dirs(mgr->plan_cast(mgr->slot(h, backward_role::grad_output)), g2d,
                                      ctx->needs_input_grad(0), ctx->needs_input_grad(1));
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = gq.rowwise.matmul(wc).reshape(ctx->saved_data["x_sizes"].toIntVector());
    if (ctx->needs_input_grad(1)) dw = gq.columnwise.t().matmul(xc);
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) db = g2d.sum(0);
    if (fp8) mgr->request_backward_update(ticket);  // a forward that did not quantize stages nothing
    return {dx, dw, db, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

/// The layer's name before NVFP4 went through it (it always took any recipe); kept so code written
/// against it compiles unchanged. New code says quantized_linear.
template <class Manager>
using fp8_linear = quantized_linear<Manager>;
template <class Manager>
using fp8_linear_function = quantized_linear_function<Manager>;

// ---- activation checkpoints -------------------------------------------------------------------------

/// The checkpointed callable: tensors in, tensors out.
using checkpoint_body = std::function<torch::autograd::variable_list(const torch::autograd::variable_list&)>;

/// reentrant: the backward replays and runs a nested torch::autograd::backward (a separate GraphTask),
///   like torch.utils.checkpoint(use_reentrant=True) and TE's _CheckpointFunction.
/// same_task: the backward replays and differentiates the replayed graph inside the CURRENT GraphTask
///   (no nested backward, so nothing the replay does can see or end an inner task). libtorch 1.13's
///   C++ API has no saved-tensor default hooks (they take PyObjects), so instead of PyTorch's
///   non-reentrant unpack-triggered replay this walks the replayed nodes itself; see
///   detail::backward_in_current_task.
enum class checkpoint_mode : std::uint8_t { reentrant, same_task };

namespace detail {

/// Runs the backward of the graph behind `roots` on the calling thread without opening a GraphTask:
/// nodes in the engine's order (highest sequence number first among the ready ones), gradients of one
/// input summed in arrival order, tensor and node hooks called, AccumulateGrad of parameters run as
/// the engine would. Gradients that reach the AccumulateGrad of a tensor in `capture` are returned
/// for that tensor instead of being accumulated into its .grad.
inline torch::autograd::variable_list backward_in_current_task(const torch::autograd::variable_list& roots,
                                                                const torch::autograd::variable_list& root_grads,
                                                                const torch::autograd::variable_list& capture,
                                                                bool keep_graph) {
  using torch::autograd::Node;
  using torch::autograd::variable_list;
  torch::autograd::variable_list captured(capture.size());
  auto capture_index = [&](Node* fn) -> std::ptrdiff_t {
    auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(fn);
    if (acc == nullptr) return -1;
    for (std::size_t i = 0; i < capture.size(); ++i)
      if (capture[i].defined() && acc->variable.is_same(capture[i])) return static_cast<std::ptrdiff_t>(i);
    return -1;
  };
  auto accumulate = [](torch::Tensor& slot, const torch::Tensor& g) {
    if (!g.defined()) return;
    slot = slot.defined() ? slot + g : g;
  };

  std::unordered_map<Node*, int> dependencies;
  std::unordered_map<Node*, variable_list> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  std::vector<torch::autograd::Edge> root_edges;
  for (const auto& r : roots) root_edges.push_back(torch::autograd::impl::gradient_edge(r));

  // dependency counts over everything reachable, stopping at captured leaves
  std::vector<Node*> stack;
  for (const auto& e : root_edges)
    if (e.is_valid() && capture_index(e.function.get()) < 0 && keep_alive.emplace(e.function.get(), e.function).second)
      stack.push_back(e.function.get());
  while (!stack.empty()) {
    Node* fn = stack.back();
    stack.pop_back();
    for (const auto& e : fn->next_edges()) {
      if (!e.is_valid() || capture_index(e.function.get()) >= 0) continue;
      ++dependencies[e.function.get()];
      if (keep_alive.emplace(e.function.get(), e.function).second) stack.push_back(e.function.get());
    }
  }

  auto cmp = [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); };
  std::priority_queue<Node*, std::vector<Node*>, decltype(cmp)> ready(cmp);
  auto deliver = [&](const torch::autograd::Edge& e, const torch::Tensor& g) {
    if (!e.is_valid()) return;
    Node* fn = e.function.get();
    if (const auto ci = capture_index(fn); ci >= 0) {
      accumulate(captured[static_cast<std::size_t>(ci)], g);
      return;
    }
    auto& buf = buffers[fn];
    if (buf.empty()) buf.resize(fn->num_inputs());
    accumulate(buf[e.input_nr], g);
  };
  for (std::size_t i = 0; i < root_edges.size(); ++i) deliver(root_edges[i], root_grads[i]);
  for (const auto& e : root_edges)
    if (e.is_valid() && capture_index(e.function.get()) < 0 && dependencies[e.function.get()] == 0) {
      dependencies[e.function.get()] = -1;  // queued once even if several roots share it
      ready.push(e.function.get());
    }

  while (!ready.empty()) {
    Node* fn = ready.top();
    ready.pop();
    variable_list inputs = std::move(buffers[fn]);
    buffers.erase(fn);
    inputs.resize(fn->num_inputs());
    for (auto& hook : fn->pre_hooks()) inputs = (*hook)(inputs);
    variable_list outputs = (*fn)(variable_list(inputs));
    for (auto& hook : fn->post_hooks()) outputs = (*hook)(outputs, inputs);
    if (!keep_graph) fn->release_variables();
    const auto& next = fn->next_edges();
    for (std::size_t j = 0; j < next.size() && j < outputs.size(); ++j) {
      const auto& e = next[j];
      if (!e.is_valid()) continue;
      deliver(e, outputs[j]);
      if (capture_index(e.function.get()) >= 0) continue;
      if (--dependencies[e.function.get()] == 0) ready.push(e.function.get());
    }
  }
  return captured;
}

template <class Manager>
struct checkpoint_state : torch::CustomClassHolder {
  checkpoint_state(Manager& m, checkpoint_body b, checkpoint_mode md, std::string name)
      : mgr(&m), body(std::move(b)), mode(md), frame(std::move(name)) {}
  Manager* mgr;
  checkpoint_body body;
  checkpoint_mode mode;
  checkpoint_frame frame;
  at::Tensor rng;                     // CPU generator state at the original forward
  bool quantization_enabled = false;  // autocast state at the call site
};

template <class Manager>
struct checkpoint_function : torch::autograd::Function<checkpoint_function<Manager>> {
  using state_t = checkpoint_state<Manager>;

  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, c10::intrusive_ptr<state_t> st,
                                                at::TensorList inputs) {
    Manager& mgr = *st->mgr;
    bool needs_grad = false;
    for (const auto& in : inputs) needs_grad = needs_grad || (in.defined() && in.requires_grad());
    st->rng = cpu_rng_state();
    st->quantization_enabled = mgr.quantization_enabled();  // TE: the replay's autocast(enabled=ctx.fp8)
    torch::autograd::variable_list outputs;
    {
      auto frame = mgr.checkpoint_forward(st->frame, needs_grad);
      auto no_grad = mgr.grad_mode(false);  // what libtorch does for this forward: no autocast exit updates
      outputs = st->body(inputs.vec());
    }
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto st = from_capsule<state_t>(ctx->saved_data["state"]);
    Manager& mgr = *st->mgr;
    const auto saved = ctx->get_saved_variables();
    torch::autograd::variable_list detached;
    detached.reserve(saved.size());
    for (std::size_t i = 0; i < saved.size(); ++i) {
      torch::Tensor d = saved[i].defined() ? saved[i].detach() : saved[i];
      if (d.defined()) d.requires_grad_(ctx->needs_input_grad(i));
      detached.push_back(d);
    }
    torch::autograd::variable_list outputs;
    {
      // Under engine_callback, opening the replay inside this task queues the update on it, so the
      // nested backward below cannot queue (or flush at the end of) its own task.
      auto frame = mgr.checkpoint_replay(st->frame);
      auto grad_on = mgr.grad_mode(true);
      auto region = mgr.autocast(st->quantization_enabled);
      rng_fork fork;  // the replay sees the forward's random stream; the backward's resumes after it
      set_cpu_rng_state(st->rng);
      torch::AutoGradMode enable(true);
      outputs = st->body(detached);
    }
    detail::require(outputs.size() == grads.size(), "checkpoint '", st->frame.name(), "': the replay returned ",
                    outputs.size(), " tensors, the original forward ", grads.size());
    torch::autograd::variable_list roots, root_grads;
    for (std::size_t i = 0; i < outputs.size(); ++i)
      if (outputs[i].defined() && outputs[i].requires_grad() && grads[i].defined()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    // one gradient per forward argument: none for the state, then one per input
    torch::autograd::variable_list result(1 + detached.size());
    torch::autograd::variable_list input_grads(detached.size());
    if (st->mode == checkpoint_mode::reentrant) {
      if (!roots.empty()) torch::autograd::backward(roots, root_grads);
      for (std::size_t i = 0; i < detached.size(); ++i)
        if (detached[i].defined() && detached[i].requires_grad()) input_grads[i] = detached[i].grad();
    } else {
      input_grads = backward_in_current_task(roots, root_grads, detached,
                                             torch::autograd::get_current_graph_task_keep_graph());
    }
    std::move(input_grads.begin(), input_grads.end(), result.begin() + 1);
    return result;
  }
};

}  // namespace detail

/// Runs `body(inputs)` as an activation checkpoint: the forward keeps only the inputs (and the CPU RNG
/// state), the backward replays `body` under `mgr.checkpoint_replay` with the forward's RNG state and
/// bit-identical scales. Under no-grad (or with no input needing grad under grad mode) the frame is
/// not eligible and nothing is kept for a replay (TE #3394).
template <class Manager>
torch::autograd::variable_list checkpoint(Manager& mgr, checkpoint_body body, const torch::autograd::variable_list& inputs,
                                          checkpoint_mode mode = checkpoint_mode::reentrant,
                                          std::string name = "checkpoint") {
  detail::require(static_cast<bool>(body), "checkpoint '", name, "': empty body");
  if (!torch::GradMode::is_enabled()) return body(inputs);
  auto st = c10::make_intrusive<detail::checkpoint_state<Manager>>(mgr, std::move(body), mode, std::move(name));
  return detail::checkpoint_function<Manager>::apply(st, at::TensorList(inputs));
}

}  // namespace tequant
