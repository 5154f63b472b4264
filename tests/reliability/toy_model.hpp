// SPDX-License-Identifier: Apache-2.0
// A hand-driven FP8 training step through the manager and the host backend: three linears (the
// middle one activation-checkpointed), every cast through plan_cast, a backward that requests the
// update, SGD. Deterministic, so two runs that start from equal states produce equal bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/manager.hpp"

namespace rel {

/// Where a step can be made to throw (exception-safety tests).
enum class fault { none, forward, replay, backward, deferred_dw };

struct fault_error : std::exception {
  const char* what() const noexcept override { return "injected fault"; }
};

template <class Manager>
struct toy_model {
  static constexpr std::size_t hidden = 8, rows = 4, layers_n = 3;
  Manager& m;
  std::vector<tequant::module_handle> h;
  std::vector<std::vector<float>> w;
  tequant::host_backend be;
  fault inject = fault::none;
  bool use_scope = true;  // false: the boundary policy alone decides when the update is flushed

  explicit toy_model(Manager& mgr, bool register_modules = true) : m(mgr) {
    for (std::size_t l = 0; l < layers_n; ++l) {
      if (register_modules) h.push_back(m.register_module("layer" + std::to_string(l)));
      else h.push_back(tequant::module_handle{static_cast<std::uint32_t>(l)});
      std::vector<float> wl(hidden * hidden);
      for (std::size_t i = 0; i < wl.size(); ++i)
        wl[i] = 0.05f * static_cast<float>(static_cast<int>((i * 7 + l * 3) % 17) - 8) + (i % (hidden + 1) == 0 ? 1.0f : 0.0f);
      w.push_back(wl);
    }
  }

  /// Quantize-dequantize through the plan (what an FP8 GEMM sees). Stateless recipes are not used here.
  std::vector<float> qdq(tequant::slot_id s, const std::vector<float>& x) {
    const tequant::cast_plan p = m.plan_cast(s);
    std::vector<std::uint8_t> q(x.size());
    float scale_inv = 0;
    be.quantize_tensor(x.data(), x.size(), p.scale, p.dtype, q.data(), &scale_inv, p.amax);
    std::vector<float> r(x.size());
    be.dequantize_tensor(q.data(), q.size(), p.dtype, &scale_inv, r.data());
    return r;
  }

  static std::vector<float> input(int step) {
    std::vector<float> x(rows * hidden);
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] = 0.1f * static_cast<float>(static_cast<int>((i * 13 + static_cast<std::size_t>(step) * 5) % 23) - 11) *
             (1.0f + 0.01f * static_cast<float>(step % 7));
    return x;
  }

  struct saved {
    std::vector<float> xq, wq;  // what the backward needs
  };

  // y[r, o] = sum_i xq[r, i] * wq[o, i]; the output cast records its amax.
  std::vector<float> linear_forward(std::size_t l, const std::vector<float>& x, saved& sv) {
    (void)m.module_forward(h[l]);
    sv.xq = qdq(m.slot(h[l], tequant::forward_role::input), x);
    sv.wq = qdq(m.slot(h[l], tequant::forward_role::weight), w[l]);
    if (inject == fault::forward && l == 1) throw fault_error{};
    std::vector<float> y(rows * hidden, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < hidden; ++o) {
        float acc = 0;
        for (std::size_t i = 0; i < hidden; ++i) acc += sv.xq[r * hidden + i] * sv.wq[o * hidden + i];
        y[r * hidden + o] = acc;
      }
    return qdq(m.slot(h[l], tequant::forward_role::output), y);
  }

  // Returns dx; applies SGD to w[l] (immediately, or deferred as backward_dw work when `defer`).
  std::vector<float> linear_backward(std::size_t l, const std::vector<float>& gy, const saved& sv, bool defer) {
    const auto g = qdq(m.slot(h[l], tequant::backward_role::grad_output), gy);
    std::vector<float> dx(rows * hidden, 0.0f), dw(hidden * hidden, 0.0f);
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t o = 0; o < hidden; ++o) {
        const float go = g[r * hidden + o];
        for (std::size_t i = 0; i < hidden; ++i) {
          dx[r * hidden + i] += go * sv.wq[o * hidden + i];
          dw[o * hidden + i] += go * sv.xq[r * hidden + i];
        }
      }
    auto apply = [this, l, dw, defer] {
      if (inject == fault::deferred_dw && defer) throw fault_error{};
      for (std::size_t i = 0; i < dw.size(); ++i) w[l][i] -= 0.05f * dw[i];
    };
    if (defer) m.defer_weight_grad(apply);
    else apply();
    auto gx = qdq(m.slot(h[l], tequant::backward_role::grad_input), dx);
    if (inject == fault::backward && l == 0) throw fault_error{};
    m.request_backward_update();
    return gx;
  }

  /// One training step; returns the loss. Layer 1 is checkpointed (recorded, then replayed in the
  /// backward); the whole backward runs in a backward scope, layer 0's weight gradient is deferred.
  float step(int k) {
    tequant::checkpoint_frame frame("layer1");
    std::vector<saved> sv(layers_n);
    std::vector<float> x = input(k), y;
    {
      auto region = m.autocast();
      y = linear_forward(0, x, sv[0]);
      const std::vector<float> x1 = y;
      {
        auto f = m.checkpoint_forward(frame);
        auto g = m.grad_mode(false);  // a reentrant checkpoint runs its forward without gradients
        y = linear_forward(1, x1, sv[1]);
      }
      sv[1].xq = x1;  // the checkpoint keeps only its input
      y = linear_forward(2, y, sv[2]);
    }
    float loss = 0;
    std::vector<float> gy(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      loss += 0.5f * y[i] * y[i];
      gy[i] = y[i] / static_cast<float>(rows);
    }
    // Not std::optional<guard>: its noexcept destructor would turn a failing flush into terminate().
    auto backward = [&] {
      gy = linear_backward(2, gy, sv[2], false);
      {
        auto f = m.checkpoint_replay(frame);
        auto region = m.autocast();
        saved re;
        (void)linear_forward(1, sv[1].xq, re);
        if (inject == fault::replay) throw fault_error{};
        sv[1] = re;
      }
      gy = linear_backward(1, gy, sv[1], false);
      gy = linear_backward(0, gy, sv[0], use_scope);
      if (use_scope) m.run_deferred_weight_grads();
    };
    if (use_scope) {
      auto scope = m.backward_scope();
      backward();
    } else {
      backward();
    }
    return loss;
  }

  std::vector<std::uint8_t> weight_bytes() const {
    std::vector<std::uint8_t> b;
    for (const auto& wl : w) {
      const auto* p = reinterpret_cast<const std::uint8_t*>(wl.data());
      b.insert(b.end(), p, p + wl.size() * sizeof(float));
    }
    return b;
  }
  void set_weight_bytes(const std::vector<std::uint8_t>& b) {
    std::size_t off = 0;
    for (auto& wl : w) {
      std::memcpy(wl.data(), b.data() + off, wl.size() * sizeof(float));
      off += wl.size() * sizeof(float);
    }
  }
};

}  // namespace rel
