// SPDX-License-Identifier: Apache-2.0
// The GPT example's FP32 ops (examples/engine/transformer_ops.hpp): each backward matches central
// finite differences of its forward, so a wrong gradient cannot hide behind "the loss went down".
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "../../examples/engine/ops.hpp"
#include "../../examples/engine/transformer_ops.hpp"

namespace {

using mini::engine;
using mini::matrix;
using mini::tensor;

tensor random_leaf(std::size_t r, std::size_t c, std::mt19937& rng, float sd = 1.0f) {
  std::normal_distribution<float> n(0.0f, sd);
  matrix m(r, c);
  for (float& v : m.data) v = n(rng);
  return mini::leaf(std::move(m), true);
}

/// Checks d loss / d p for every leaf p against central differences; loss = f() must be a 1x1 tensor.
void check_gradients(const std::function<tensor(engine&)>& f, const std::vector<tensor>& params) {
  engine e;
  for (const auto& p : params) p->grad = {};
  e.backward(f(e));
  for (const auto& p : params) {
    REQUIRE(p->grad.size() == p->value.size());
    for (std::size_t i = 0; i < p->value.size(); ++i) {
      const float keep = p->value.data[i], h = 1e-2f;
      auto no_grad = e.grad_mode(false);
      p->value.data[i] = keep + h;
      const double up = f(e)->value.data[0];
      p->value.data[i] = keep - h;
      const double down = f(e)->value.data[0];
      p->value.data[i] = keep;
      const double numeric = (up - down) / (2.0 * h);
      CHECK(p->grad.data[i] == doctest::Approx(numeric).epsilon(2e-2).scale(1e-2));
    }
  }
}

/// A scalar that depends on every element of y: cross-entropy of a fixed random projection to 2 logits.
tensor project(engine& e, const tensor& y, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  matrix w(2, y->value.cols);
  for (float& v : w.data) v = n(rng);
  std::vector<std::uint32_t> targets(y->value.rows);
  for (std::size_t i = 0; i < targets.size(); ++i) targets[i] = static_cast<std::uint32_t>(i % 2);
  return mini::cross_entropy(e, mini::linear_fp32(e, y, mini::leaf(w)), targets);
}

}  // namespace

TEST_CASE("layernorm: gradients of input, gain and bias match finite differences") {
  std::mt19937 rng(1);
  const tensor x = random_leaf(3, 8, rng), g = random_leaf(1, 8, rng), b = random_leaf(1, 8, rng);
  check_gradients([&](engine& e) { return project(e, mini::layernorm(e, x, g, b), 7); }, {x, g, b});
}

TEST_CASE("causal_attention: gradients of q, k and v match finite differences; the future is not seen") {
  std::mt19937 rng(2);
  const std::size_t T = 4, heads = 2, d = 4;
  const tensor qkv = random_leaf(2 * T, 3 * d, rng);
  check_gradients([&](engine& e) { return project(e, mini::causal_attention(e, qkv, T, heads), 9); }, {qkv});
  // Changing the last position's keys and values changes no earlier output.
  engine e;
  const matrix before = mini::causal_attention(e, qkv, T, heads)->value;
  for (std::size_t c = d; c < 3 * d; ++c) qkv->value(T - 1, c) += 1.0f;
  const matrix after = mini::causal_attention(e, qkv, T, heads)->value;
  for (std::size_t r = 0; r + 1 < T; ++r)
    for (std::size_t c = 0; c < d; ++c) CHECK(before(r, c) == after(r, c));
}

TEST_CASE("embedding, linear_fp32 and cross_entropy: gradients match finite differences") {
  std::mt19937 rng(3);
  const tensor table = random_leaf(5, 4, rng), w = random_leaf(5, 4, rng);
  const std::vector<std::uint32_t> ids{0, 3, 3, 1, 4, 2}, targets{1, 0, 4, 4, 2, 3};
  check_gradients(
      [&](engine& e) { return mini::cross_entropy(e, mini::linear_fp32(e, mini::embedding(e, table, ids), w), targets); },
      {table, w});
}

TEST_CASE("cross_entropy of uniform logits is log(vocab)") {
  engine e;
  const tensor z = mini::leaf(matrix(3, 7, 0.5f), true);
  CHECK(mini::cross_entropy(e, z, {0, 3, 6})->value.data[0] == doctest::Approx(std::log(7.0)));
}
