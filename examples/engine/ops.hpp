// SPDX-License-Identifier: Apache-2.0
// The few element-wise ops and the loss the example models need (FP32; no quantization here).
#pragma once
#include <cmath>
#include <cstddef>
#include <vector>

#include "autograd.hpp"

namespace mini {

inline tensor add(engine& e, const tensor& a, const tensor& b) {
  matrix y = a->value;
  for (std::size_t i = 0; i < y.size(); ++i) y.data[i] += b->value.data[i];
  return e.record(std::move(y), {a, b}, "add", [](const matrix& g) { return std::vector<matrix>{g, g}; });
}

/// GELU, tanh approximation (as in GPT-2).
inline tensor gelu(engine& e, const tensor& x) {
  constexpr float k = 0.7978845608f;  // sqrt(2/pi)
  matrix y = x->value;
  for (float& v : y.data) v = 0.5f * v * (1.0f + std::tanh(k * (v + 0.044715f * v * v * v)));
  matrix saved = x->value;
  return e.record(std::move(y), {x}, "gelu", [saved = std::move(saved)](const matrix& g) {
    matrix d = g;
    for (std::size_t i = 0; i < d.size(); ++i) {
      const float v = saved.data[i], t = std::tanh(k * (v + 0.044715f * v * v * v));
      d.data[i] *= 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * v * v);
    }
    return std::vector<matrix>{d};
  });
}

/// Mean squared error over every element, as a 1x1 tensor.
inline tensor mse_loss(engine& e, const tensor& y, const matrix& target) {
  double s = 0.0;
  for (std::size_t i = 0; i < target.size(); ++i) {
    const double d = double(y->value.data[i]) - target.data[i];
    s += d * d;
  }
  const float n = static_cast<float>(target.size());
  matrix loss(1, 1, static_cast<float>(s / n));
  return e.record(std::move(loss), {y}, "mse", [yv = y->value, target, n](const matrix& g) {
    matrix d = yv;
    for (std::size_t i = 0; i < d.size(); ++i) d.data[i] = g.data[0] * 2.0f * (yv.data[i] - target.data[i]) / n;
    return std::vector<matrix>{d};
  });
}

}  // namespace mini
