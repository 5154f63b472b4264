// SPDX-License-Identifier: Apache-2.0
// A linear layer y = x W^T whose GEMM operands are quantized through a tequant manager, for every
// recipe. This CPU example "fake-quantizes": it casts each operand to FP8 with the recipe's scales,
// decodes it again, and runs the GEMM in FP32 on the decoded values. That is what an FP8 tensor-core
// GEMM computes (up to accumulation order), so training sees FP8's rounding and saturation.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <tequant/backend/host.hpp>
#include <tequant/backend/layouts.hpp>
#include <tequant/cast_cache.hpp>
#include <tequant/manager_types.hpp>
#include <tequant/quantized_tensor.hpp>

#include "autograd.hpp"
#include "gemm.hpp"

namespace mini {

// ---- quantization through the manager ---------------------------------------------------------

/// Smallest and largest scale (the factor applied before the FP8 cast) seen since the last reset.
struct scale_range {
  float lo = 0.0f, hi = 0.0f;
  bool seen = false;
  void add(float s) {
    lo = seen ? std::min(lo, s) : s;
    hi = seen ? std::max(hi, s) : s;
    seen = true;
  }
};

/// An operand after quantize + dequantize. Block recipes scale along a direction, so a GEMM that
/// contracts over the rows (the weight-gradient GEMM) reads the columnwise copy; per-tensor recipes
/// have one copy.
struct quantized {
  matrix rowwise;     // scaled along each row (blocks of the last dim)
  matrix columnwise;  // scaled along each column; empty = same as rowwise
  const matrix& row() const { return rowwise; }
  const matrix& col() const { return columnwise.empty() ? rowwise : columnwise; }
};

/// The decoded values of a cast (both directions where the recipe made two) and the scales it used.
template <class Manager>
quantized decode(Manager& m, const tequant::cast_plan& plan, tequant::quantized_tensor<typename Manager::backend_type>& q,
                 std::size_t rows, std::size_t cols, scale_range& seen) {
  const auto& be = m.backend();
  quantized out;
  out.rowwise = matrix(rows, cols);
  be.dequantize(plan, rows, cols, q.output(), false, out.rowwise.data);
  if (q.has_columnwise()) {  // block recipes scale along a direction: the wgrad GEMM reads this one
    out.columnwise = matrix(rows, cols);
    be.dequantize(plan, rows, cols, q.output(), true, out.columnwise.data);
  }
  tequant::for_each_scale(plan, rows, cols, q.output(), [&](float s) { seen.add(s); });
  return out;
}

// example-begin quantize
/// Quantizes `x` for `slot` as the manager's recipe says and returns the decoded values. Nothing here
/// depends on the recipe: the plan carries the scaling mode, the scale to use and where to record the
/// amax (in a checkpoint replay: the original forward's scale, and nothing recorded).
template <class Manager>
quantized quantize(Manager& m, tequant::slot_id slot, const matrix& x, scale_range& seen) {
  const tequant::cast_plan plan = m.plan_cast(slot);
  const auto& be = m.backend();
  const tequant::matrix_view<const float> v{x.data.data(), x.rows, x.cols};
  tequant::quantized_tensor<typename Manager::backend_type> q;
  q.prepare(be, plan, x.rows, x.cols);  // one copy when rowwise and columnwise would be equal
  be.quantize(v, plan, q.output());
  return decode(m, plan, q, x.rows, x.cols, seen);
}
// example-end

/// Keeps the operand in FP32 (quantization disabled) in the same shape as quantize().
inline quantized keep(const matrix& x) { return {x, {}}; }

// example-begin identity_cast
/// quantize() with the cast replaced by the identity: the manager still plans the cast (scale, replay
/// frame, where the amax goes) and the amax is still recorded, so every piece of tequant's bookkeeping
/// runs as in an FP8 step, but the values stay FP32. Training through it gives the FP32 run's numbers;
/// its extra time over FP32 bounds what the bookkeeping costs (the amax pass included, which a real FP8
/// cast fuses into its kernel).
template <class Manager>
quantized identity_cast(Manager& m, tequant::slot_id slot, const matrix& x, scale_range& seen) {
  const tequant::cast_plan plan = m.plan_cast(slot);
  const auto& be = m.backend();
  if (plan.amax != nullptr) {
    float amax = 0.0f;
    be.amax(x.data.data(), x.size(), &amax);
    be.max_accumulate(plan.amax, amax);
  }
  if (plan.mode == tequant::scaling_mode::tensor_scale && plan.scale != nullptr) seen.add(be.read(plan.scale));
  return keep(x);
}
// example-end

// ---- the layer -----------------------------------------------------------------------------------

// example-begin fp8_linear
/// y = x W^T. Registers one module (one GEMM) with the manager. Forward casts the input and the
/// weight, backward casts grad_output and then REQUESTS the backward update; when that update runs
/// is the boundary policy's business, never the layer's.
template <class Manager>
class fp8_linear {
  Manager* m_;
  tequant::module_handle h_;

 public:
  fp8_linear(Manager& m, std::string name, std::size_t in, std::size_t out, std::mt19937& rng)
      : m_(&m), h_(m.register_module(std::move(name))), weight(leaf(matrix(out, in), true)) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    const float bound = 1.0f / std::sqrt(static_cast<float>(in));
    for (float& w : weight->value.data) w = bound * u(rng);
  }

  tensor operator()(engine& e, const tensor& x) {
    using tequant::backward_role;
    using tequant::forward_role;
    Manager& m = *m_;
    const bool fp8 = m.quantization_enabled();  // inside an enabled autocast region?
    // Under first_module_owner the ticket says whether this module owns the backward update (TE's old
    // rule); every other boundary ignores it.
    const tequant::backward_ticket ticket = m.module_forward(h_, e.grad_enabled());
    const quantized qx = fp8 ? cast(m.slot(h_, forward_role::input), x->value, seen[0]) : keep(x->value);
    const quantized qw = !fp8 ? keep(weight->value)
                         : weight_key != nullptr ? cached_weight()
                                                 : cast(m.slot(h_, forward_role::weight), weight->value, seen[1]);
    matrix y = gemm_nt(qx.row(), qw.row());
    return e.record(std::move(y), {x, weight}, m.module_name(h_),
                    [this, &m, fp8, ticket, xs = qx.col(), ws = qw.col()](const matrix& g) {
                      const quantized qg =
                          fp8 ? cast(m.slot(h_, backward_role::grad_output), g, seen[2]) : keep(g);
                      matrix dx = gemm(qg.row(), ws);  // dgrad
                      matrix dw;
                      auto wgrad = [gc = qg.col(), xs] { return gemm_tn(gc, xs); };
                      if (defer_wgrad)
                        m.defer_weight_grad([this, wgrad] { accumulate_weight_grad(wgrad()); });  // backward_dw
                      else
                        dw = wgrad();
                      if (fp8) m.request_backward_update(ticket);
                      return std::vector<matrix>{std::move(dx), std::move(dw)};
                    });
  }
  // example-end

  void accumulate_weight_grad(const matrix& dw) {
    if (weight->grad.empty()) weight->grad = matrix(dw.rows, dw.cols);
    for (std::size_t i = 0; i < dw.size(); ++i) weight->grad.data[i] += dw.data[i];
  }

  /// quantize(), or identity_cast() when identity_casts is set.
  quantized cast(tequant::slot_id slot, const matrix& x, scale_range& seen) {
    return identity_casts ? identity_cast(*m_, slot, x, seen) : quantize(*m_, slot, x, seen);
  }

  // example-begin cached_weight
  /// The weight's cast through weight_cache: made by the step's first forward, reused by the other
  /// micro-batches and by checkpoint replays while the key, the weight and its scale stay the same.
  /// Identity casts bypass the cache (it holds real casts).
  quantized cached_weight() {
    if (identity_casts) return cast(m_->slot(h_, tequant::forward_role::weight), weight->value, seen[1]);
    const tequant::cast_plan plan = m_->plan_cast(m_->slot(h_, tequant::forward_role::weight));
    const tequant::matrix_view<const float> v{weight->value.data.data(), weight->value.rows, weight->value.cols};
    bool cast_now = false;
    auto& q = weight_cache.cast(m_->backend(), plan, v, *weight_key, &cast_now);
    if (cast_now) weight_decoded = decode(*m_, plan, q, v.rows, v.cols, seen[1]);
    return weight_decoded;
  }
  // example-end

  tequant::module_handle handle() const { return h_; }
  const std::string& name() const { return m_->module_name(h_); }

  tensor weight;             // [out, in], a parameter (leaf)
  bool defer_wgrad = false;  // compute dW later, in manager.run_deferred_weight_grads() (pipelines)
  bool identity_casts = false;  // cast() does identity_cast(): tequant's bookkeeping without the FP8 casts
  scale_range seen[3];       // input, weight, grad_output scales since the last reset
  /// Set (by a trainer that bumps it after every optimizer step) to reuse the weight's cast.
  const typename tequant::cast_cache<typename Manager::backend_type>::key* weight_key = nullptr;
  tequant::cast_cache<typename Manager::backend_type> weight_cache;
  quantized weight_decoded;  // the decoded copy of weight_cache's cast
};

}  // namespace mini
