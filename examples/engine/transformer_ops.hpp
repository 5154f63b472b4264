// SPDX-License-Identifier: Apache-2.0
// The FP32 ops a decoder-only transformer needs besides its quantized linears: embeddings, LayerNorm,
// causal multi-head softmax attention, a plain FP32 linear (the output head) and cross-entropy. As in
// TransformerEngine, none of these quantize: softmax, normalisation and the loss stay in FP32.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "autograd.hpp"
#include "gemm.hpp"

namespace mini {

/// out[i] = table[ids[i]] (table: [vocab, d], a parameter); backward scatters rows into table's grad.
inline tensor embedding(engine& e, const tensor& table, std::vector<std::uint32_t> ids) {
  const std::size_t d = table->value.cols;
  matrix y(ids.size(), d);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] >= table->value.rows) throw std::out_of_range("embedding: id " + std::to_string(ids[i]) + " >= rows");
    const float* src = &table->value.data[ids[i] * d];
    for (std::size_t j = 0; j < d; ++j) y.data[i * d + j] = src[j];
  }
  const std::size_t rows = table->value.rows;
  return e.record(std::move(y), {table}, "embedding", [ids = std::move(ids), rows, d](const matrix& g) {
    matrix dt(rows, d);
    for (std::size_t i = 0; i < ids.size(); ++i)
      for (std::size_t j = 0; j < d; ++j) dt.data[ids[i] * d + j] += g.data[i * d + j];
    return std::vector<matrix>{std::move(dt)};
  });
}

/// Row-wise LayerNorm with gain and bias ([1, d] parameters), eps 1e-5.
inline tensor layernorm(engine& e, const tensor& x, const tensor& gain, const tensor& bias) {
  const std::size_t n = x->value.rows, d = x->value.cols;
  matrix y(n, d), xhat(n, d);
  std::vector<float> rstd(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float* xi = &x->value.data[i * d];
    double mu = 0.0, var = 0.0;
    for (std::size_t j = 0; j < d; ++j) mu += xi[j];
    mu /= double(d);
    for (std::size_t j = 0; j < d; ++j) var += (xi[j] - mu) * (xi[j] - mu);
    var /= double(d);
    rstd[i] = static_cast<float>(1.0 / std::sqrt(var + 1e-5));
    for (std::size_t j = 0; j < d; ++j) {
      const float h = static_cast<float>(xi[j] - mu) * rstd[i];
      xhat.data[i * d + j] = h;
      y.data[i * d + j] = h * gain->value.data[j] + bias->value.data[j];
    }
  }
  return e.record(std::move(y), {x, gain, bias}, "layernorm",
                  [xhat = std::move(xhat), rstd = std::move(rstd), g_ = gain->value, n, d](const matrix& g) {
                    matrix dx(n, d), dg(1, d), db(1, d);
                    for (std::size_t i = 0; i < n; ++i) {
                      double m1 = 0.0, m2 = 0.0;  // mean(dxhat), mean(dxhat * xhat)
                      for (std::size_t j = 0; j < d; ++j) {
                        const float dy = g.data[i * d + j], h = xhat.data[i * d + j], dh = dy * g_.data[j];
                        dg.data[j] += dy * h;
                        db.data[j] += dy;
                        m1 += dh;
                        m2 += dh * h;
                      }
                      m1 /= double(d);
                      m2 /= double(d);
                      for (std::size_t j = 0; j < d; ++j) {
                        const float h = xhat.data[i * d + j], dh = g.data[i * d + j] * g_.data[j];
                        dx.data[i * d + j] = rstd[i] * static_cast<float>(dh - m1 - h * m2);
                      }
                    }
                    return std::vector<matrix>{std::move(dx), std::move(dg), std::move(db)};
                  });
}

/// Causal multi-head self-attention on packed projections: qkv is [batch*T, 3*d] (q | k | v, each
/// split into `heads` heads of d/heads columns); returns [batch*T, d]. Softmax in FP32; the score and
/// value products are plain loops (they are not GEMMs tequant quantizes, as in TE's FP32 softmax path).
inline tensor causal_attention(engine& e, const tensor& qkv, std::size_t T, std::size_t heads) {
  const std::size_t n = qkv->value.rows, d3 = qkv->value.cols, d = d3 / 3, hd = d / heads;
  if (d3 % 3 != 0 || d % heads != 0 || T == 0 || n % T != 0)
    throw std::invalid_argument("causal_attention: bad shapes");
  const std::size_t B = n / T;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const float* X = qkv->value.data.data();
  matrix y(n, d);
  auto P = std::make_shared<std::vector<float>>(B * heads * T * T, 0.0f);  // softmax probabilities
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t h = 0; h < heads; ++h) {
      float* p = &(*P)[(b * heads + h) * T * T];
      for (std::size_t i = 0; i < T; ++i) {
        const float* q = X + (b * T + i) * d3 + h * hd;
        float mx = -INFINITY;
        for (std::size_t j = 0; j <= i; ++j) {
          const float* k = X + (b * T + j) * d3 + d + h * hd;
          float s = 0.0f;
          for (std::size_t c = 0; c < hd; ++c) s += q[c] * k[c];
          p[i * T + j] = s * scale;
          mx = std::max(mx, p[i * T + j]);
        }
        float sum = 0.0f;
        for (std::size_t j = 0; j <= i; ++j) sum += (p[i * T + j] = std::exp(p[i * T + j] - mx));
        float* out = &y.data[(b * T + i) * d + h * hd];
        for (std::size_t j = 0; j <= i; ++j) {
          p[i * T + j] /= sum;
          const float* v = X + (b * T + j) * d3 + 2 * d + h * hd;
          for (std::size_t c = 0; c < hd; ++c) out[c] += p[i * T + j] * v[c];
        }
      }
    }
  return e.record(std::move(y), {qkv}, "causal_attention", [P, saved = qkv->value, T, heads, B, d, hd, scale](const matrix& g) {
    const std::size_t d3 = 3 * d;
    matrix dqkv(saved.rows, d3);
    std::vector<float> dp(T);
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t h = 0; h < heads; ++h) {
        const float* p = &(*P)[(b * heads + h) * T * T];
        for (std::size_t i = 0; i < T; ++i) {
          const float* dout = &g.data[(b * T + i) * d + h * hd];
          const float* q = &saved.data[(b * T + i) * d3 + h * hd];
          float* dq = &dqkv.data[(b * T + i) * d3 + h * hd];
          float dot = 0.0f;  // sum_j p_ij dp_ij
          for (std::size_t j = 0; j <= i; ++j) {
            const float* v = &saved.data[(b * T + j) * d3 + 2 * d + h * hd];
            float* dv = &dqkv.data[(b * T + j) * d3 + 2 * d + h * hd];
            float s = 0.0f;
            for (std::size_t c = 0; c < hd; ++c) {
              s += dout[c] * v[c];
              dv[c] += p[i * T + j] * dout[c];
            }
            dp[j] = s;
            dot += p[i * T + j] * s;
          }
          for (std::size_t j = 0; j <= i; ++j) {
            const float ds = p[i * T + j] * (dp[j] - dot) * scale;
            const float* k = &saved.data[(b * T + j) * d3 + d + h * hd];
            float* dk = &dqkv.data[(b * T + j) * d3 + d + h * hd];
            for (std::size_t c = 0; c < hd; ++c) {
              dq[c] += ds * k[c];
              dk[c] += ds * q[c];
            }
          }
        }
      }
    return std::vector<matrix>{std::move(dqkv)};
  });
}

/// y = x W^T in FP32 (W: [out, in], a parameter): the output head, which stays unquantized.
inline tensor linear_fp32(engine& e, const tensor& x, const tensor& w) {
  return e.record(gemm_nt(x->value, w->value), {x, w}, "linear_fp32",
                  [xs = x->value, ws = w->value](const matrix& g) {
                    return std::vector<matrix>{gemm(g, ws), gemm_tn(g, xs)};
                  });
}

/// Mean cross-entropy of logits [n, vocab] against `targets`, as a 1x1 tensor (log-softmax in FP32).
inline tensor cross_entropy(engine& e, const tensor& logits, const std::vector<std::uint32_t>& targets) {
  const std::size_t n = logits->value.rows, v = logits->value.cols;
  if (targets.size() != n) throw std::invalid_argument("cross_entropy: one target per row");
  matrix probs(n, v);
  double loss = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const float* z = &logits->value.data[i * v];
    float mx = z[0];
    for (std::size_t j = 1; j < v; ++j) mx = std::max(mx, z[j]);
    double sum = 0.0;
    for (std::size_t j = 0; j < v; ++j) sum += (probs.data[i * v + j] = std::exp(z[j] - mx));
    for (std::size_t j = 0; j < v; ++j) probs.data[i * v + j] = static_cast<float>(probs.data[i * v + j] / sum);
    loss += std::log(sum) - double(z[targets[i]] - mx);
  }
  matrix out(1, 1, static_cast<float>(loss / double(n)));
  return e.record(std::move(out), {logits}, "cross_entropy", [probs = std::move(probs), targets, n, v](const matrix& g) {
    matrix d = probs;
    const float k = g.data[0] / static_cast<float>(n);
    for (std::size_t i = 0; i < n; ++i) {
      d.data[i * v + targets[i]] -= 1.0f;
      for (std::size_t j = 0; j < v; ++j) d.data[i * v + j] *= k;
    }
    return std::vector<matrix>{std::move(d)};
  });
}

}  // namespace mini
