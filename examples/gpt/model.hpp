// SPDX-License-Identifier: Apache-2.0
// A decoder-only transformer (GPT) on the examples' mini engine, generic over tequant's manager: the
// four GEMMs of each block (QKV, attention output, MLP up and down) are fp8_linear modules, so every
// operand (input, weight, grad_output) is cast through the manager's plan; embeddings, LayerNorm,
// softmax attention, the output head and the loss stay in FP32, as in TransformerEngine.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "../engine/autograd.hpp"
#include "../engine/checkpoint.hpp"
#include "../engine/fp8_linear.hpp"
#include "../engine/ops.hpp"
#include "../engine/transformer_ops.hpp"
#include "options.hpp"

namespace gpt {

using mini::engine;
using mini::matrix;
using mini::tensor;

struct shape {
  std::size_t vocab, layers, d, heads, context;
};

// example-begin gpt_model
template <class Manager>
struct model {
  using linear = mini::fp8_linear<Manager>;
  struct block {
    tensor ln1_gain, ln1_bias, ln2_gain, ln2_bias;
    std::unique_ptr<linear> qkv, proj, fc1, fc2;  // the quantized GEMMs
  };

  Manager& m;
  shape s;
  recompute rc;
  tensor tok, pos, lnf_gain, lnf_bias, head;
  std::vector<block> blocks;

  model(Manager& mgr, shape sh, recompute r, std::mt19937& rng) : m(mgr), s(sh), rc(r) {
    tok = normal(s.vocab, s.d, 0.02f, rng);
    pos = normal(s.context, s.d, 0.02f, rng);
    for (std::size_t b = 0; b < s.layers; ++b) {
      const std::string p = "block" + std::to_string(b) + ".";
      block k{ones(s.d), zeros(s.d), ones(s.d), zeros(s.d), nullptr, nullptr, nullptr, nullptr};
      k.qkv = std::make_unique<linear>(m, p + "qkv", s.d, 3 * s.d, rng);
      k.proj = std::make_unique<linear>(m, p + "attn_out", s.d, s.d, rng);
      k.fc1 = std::make_unique<linear>(m, p + "mlp_up", s.d, 4 * s.d, rng);
      k.fc2 = std::make_unique<linear>(m, p + "mlp_down", 4 * s.d, s.d, rng);
      blocks.push_back(std::move(k));
    }
    lnf_gain = ones(s.d);
    lnf_bias = zeros(s.d);
    head = normal(s.vocab, s.d, 1.0f / std::sqrt(float(s.d)), rng);
  }

  /// Pre-LayerNorm block: h + attn_out(attention(qkv(ln1(h)))), then + mlp_down(gelu(mlp_up(ln2(.)))).
  tensor run_block(engine& e, std::size_t b, const tensor& h, std::size_t T) {
    block& k = blocks[b];
    const tensor qkv = (*k.qkv)(e, mini::layernorm(e, h, k.ln1_gain, k.ln1_bias));
    const tensor a = mini::add(e, h, (*k.proj)(e, mini::causal_attention(e, qkv, T, s.heads)));
    const tensor u = (*k.fc1)(e, mini::layernorm(e, a, k.ln2_gain, k.ln2_bias));
    return mini::add(e, a, (*k.fc2)(e, mini::gelu(e, u)));
  }

  /// Logits [batch*T, vocab] for `ids` (batch windows of T characters).
  tensor operator()(engine& e, const std::vector<std::uint32_t>& ids, std::size_t T) {
    std::vector<std::uint32_t> positions(ids.size());
    for (std::size_t i = 0; i < ids.size(); ++i) positions[i] = static_cast<std::uint32_t>(i % T);
    tensor h = mini::add(e, mini::embedding(e, tok, ids), mini::embedding(e, pos, std::move(positions)));
    for (std::size_t b = 0; b < s.layers;) {
      // nested: a checkpoint of two blocks whose blocks are checkpoints too (replays inside a replay)
      if (rc == recompute::nested && b + 1 < s.layers) {
        auto pair = [this, &e, b, T](const tensor& x) { return one_block(e, b + 1, one_block(e, b, x, T), T); };
        h = recomputed(e, pair, h, "blocks" + std::to_string(b) + "-" + std::to_string(b + 1));
        b += 2;
      } else {
        h = one_block(e, b, h, T);
        b += 1;
      }
    }
    return mini::linear_fp32(e, mini::layernorm(e, h, lnf_gain, lnf_bias), head);
  }

  tensor one_block(engine& e, std::size_t b, const tensor& x, std::size_t T) {
    auto fn = [this, &e, b, T](const tensor& u) { return run_block(e, b, u, T); };
    return recomputed(e, fn, x, "block" + std::to_string(b));
  }

  template <class F>
  tensor recomputed(engine& e, F&& fn, const tensor& x, std::string name) {
    if constexpr (Manager::supports_recompute) {
      if (rc != recompute::none) return mini::checkpoint(e, m, fn, x, std::move(name));
    }
    return fn(x);
  }
  // example-end

  std::vector<linear*> linears() {
    std::vector<linear*> r;
    for (auto& k : blocks) r.insert(r.end(), {k.qkv.get(), k.proj.get(), k.fc1.get(), k.fc2.get()});
    return r;
  }
  std::vector<tensor> parameters() {
    std::vector<tensor> r{tok, pos, lnf_gain, lnf_bias, head};
    for (auto& k : blocks)
      r.insert(r.end(), {k.ln1_gain, k.ln1_bias, k.ln2_gain, k.ln2_bias, k.qkv->weight, k.proj->weight,
                         k.fc1->weight, k.fc2->weight});
    return r;
  }

 private:
  static tensor normal(std::size_t r, std::size_t c, float sd, std::mt19937& rng) {
    std::normal_distribution<float> n(0.0f, sd);
    matrix v(r, c);
    for (float& x : v.data) x = n(rng);
    return mini::leaf(std::move(v), true);
  }
  static tensor ones(std::size_t d) { return mini::leaf(matrix(1, d, 1.0f), true); }
  static tensor zeros(std::size_t d) { return mini::leaf(matrix(1, d, 0.0f), true); }
};

/// Adam on every parameter, with linear warmup and cosine decay to 10% of the peak rate.
class adam {
 public:
  adam(std::vector<tensor> params, float lr, int total_steps) : p_(std::move(params)), lr_(lr), total_(total_steps) {
    for (auto& t : p_) {
      m_.emplace_back(t->value.size(), 0.0f);
      v_.emplace_back(t->value.size(), 0.0f);
    }
  }
  void step() {
    ++t_;
    const int warm = std::max(1, std::min(20, total_ / 10));
    const float progress = float(std::max(0, t_ - warm)) / float(std::max(1, total_ - warm));
    const float lr = t_ <= warm ? lr_ * float(t_) / float(warm)
                                : lr_ * (0.1f + 0.45f * (1.0f + std::cos(3.14159265f * progress)));
    const float c1 = 1.0f - std::pow(0.9f, float(t_)), c2 = 1.0f - std::pow(0.95f, float(t_));
    for (std::size_t i = 0; i < p_.size(); ++i) {
      auto& w = p_[i];
      if (w->grad.empty()) continue;
      for (std::size_t j = 0; j < w->value.size(); ++j) {
        const float g = w->grad.data[j];
        m_[i][j] = 0.9f * m_[i][j] + 0.1f * g;
        v_[i][j] = 0.95f * v_[i][j] + 0.05f * g * g;
        w->value.data[j] -= lr * (m_[i][j] / c1) / (std::sqrt(v_[i][j] / c2) + 1e-8f);
      }
      w->grad = {};
    }
  }

 private:
  std::vector<tensor> p_;
  float lr_;
  int total_;
  std::vector<std::vector<float>> m_, v_;
  int t_ = 0;
};

}  // namespace gpt
