// SPDX-License-Identifier: Apache-2.0
// FP8 training on the GPU through the manager: a linear layer (y = W x, 64 -> 16) learns a fixed
// teacher with delayed scaling on cuda_backend. Inputs, weights and output gradients are cast to
// FP8 with the scales the manager plans (device pointers), the layer runs under a checkpoint frame
// and is recomputed in the backward with the scales of its original forward, and the forward update
// and the backward flush are one kernel launch each on the backend's stream, with no host
// synchronisation. The loop reads the loss and the scales back only to print them.
//
//   cuda_training [steps]      (default 40; exits 0 with a message when there is no CUDA device)
#include <tequant/backend/cuda/backend.cuh>
#include <tequant/boundary/explicit_scope.hpp>
#include <tequant/checkpoint/stacked_recompute.hpp>
#include <tequant/comm/single_process.hpp>
#include <tequant/manager.hpp>
#include <tequant/recipe/delayed.hpp>

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <vector>

namespace {

constexpr int batch = 256, in_dim = 64, out_dim = 16;

// y[b, o] = sum_i x[b, i] * w[o, i]
__global__ void linear_forward(const float* x, const float* w, float* y) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= batch * out_dim) return;
  const int b = t / out_dim, o = t % out_dim;
  float acc = 0.0f;
  for (int i = 0; i < in_dim; ++i) acc += x[b * in_dim + i] * w[o * in_dim + i];
  y[t] = acc;
}

// dy = d(mean squared error)/dy; the loss is accumulated into *loss.
__global__ void mse_grad(const float* y, const float* target, float* dy, float* loss) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= batch * out_dim) return;
  const float d = y[t] - target[t];
  dy[t] = 2.0f * d / (batch * out_dim);
  atomicAdd(loss, d * d / (batch * out_dim));
}

// w[o, i] -= lr * sum_b dy[b, o] * x[b, i]
__global__ void sgd_step(const float* x, const float* dy, float* w, float lr) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= out_dim * in_dim) return;
  const int o = t / in_dim, i = t % in_dim;
  float g = 0.0f;
  for (int b = 0; b < batch; ++b) g += dy[b * out_dim + o] * x[b * in_dim + i];
  w[t] -= lr * g;
}

void check_launch(const char* what) { tequant::detail::check_launch(what); }

using manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::explicit_scope,
                                              tequant::stacked_recompute, tequant::single_process, tequant::cuda_backend>;

/// One FP8 tensor: data, its scale_inv, and the dequantized values the (FP32) kernels use.
struct fp8_tensor {
  tequant::device_buffer<std::uint8_t> q;
  tequant::device_buffer<float> scale_inv, deq;
  explicit fp8_tensor(const tequant::cuda_backend& be, std::size_t n)
      : q(be.make_buffer<std::uint8_t>(n)), scale_inv(be.make_buffer<float>(1)), deq(be.make_buffer<float>(n)) {}
};

/// Casts x (n values) with the plan of `slot` and dequantizes it for the FP32 kernels.
void cast(manager& m, const tequant::cuda_backend& be, tequant::slot_id slot, const float* x, std::size_t n, fp8_tensor& t) {
  const tequant::cast_plan p = m.plan_cast(slot);
  be.quantize_tensor(x, n, p.scale, p.dtype, t.q.data(), t.scale_inv.data(), p.amax);
  be.dequantize_tensor(t.q.data(), n, p.dtype, t.scale_inv.data(), t.deq.data());
}

int run(int steps) {
  cudaStream_t stream = nullptr;
  tequant::detail::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const tequant::cuda_backend be{stream};
  const unsigned threads = 128;
  const auto blocks = [&](int n) { return static_cast<unsigned>((n + threads - 1) / threads); };

  manager m(tequant::delayed_params{tequant::fp8_format::hybrid, 16, 0, true}, {}, {}, be);
  const tequant::module_handle layer = m.register_module("linear");
  const auto x_slot = m.slot(layer, tequant::forward_role::input);
  const auto w_slot = m.slot(layer, tequant::forward_role::weight);
  const auto dy_slot = m.slot(layer, tequant::backward_role::grad_output);

  std::mt19937 rng(2024);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> host(batch * in_dim), teacher(out_dim * in_dim);
  for (auto& v : teacher) v = 0.5f * normal(rng);
  auto w = be.make_buffer<float>(out_dim * in_dim);  // starts at 0
  auto w_teacher = be.make_buffer<float>(out_dim * in_dim);
  be.upload(w_teacher.data(), teacher.data(), teacher.size());
  auto x = be.make_buffer<float>(batch * in_dim);
  auto y = be.make_buffer<float>(batch * out_dim), target = be.make_buffer<float>(batch * out_dim);
  auto dy = be.make_buffer<float>(batch * out_dim), loss = be.make_buffer<float>(1);
  fp8_tensor xq(be, batch * in_dim), wq(be, out_dim * in_dim), xr(be, batch * in_dim), wr(be, out_dim * in_dim),
      dyq(be, batch * out_dim);
  tequant::checkpoint_frame frame("linear");

  std::printf("FP8 delayed scaling on the GPU: linear %d -> %d, batch %d, %d steps\n", in_dim, out_dim, batch, steps);
  std::printf("%5s %12s %9s %9s %12s %12s %12s\n", "step", "loss", "fwd upd", "bwd upd", "scale(x)", "scale(w)",
              "scale(dy)");
  float first_loss = 0.0f, last_loss = 0.0f;
  for (int step = 0; step < steps; ++step) {
    for (auto& v : host) v = normal(rng);
    be.upload(x.data(), host.data(), host.size());
    linear_forward<<<blocks(batch * out_dim), threads, 0, stream>>>(x.data(), w_teacher.data(), target.data());
    check_launch("linear_forward(teacher)");
    be.fill(loss.data(), 1, 0.0f);

    {  // forward: casts record their amaxes; leaving the region runs the forward update (one launch)
      auto ac = m.autocast();
      auto ckpt = m.checkpoint_forward(frame);  // the layer's activations are recomputed in the backward
      (void)m.module_forward(layer);
      cast(m, be, x_slot, x.data(), batch * in_dim, xq);
      cast(m, be, w_slot, w.data(), out_dim * in_dim, wq);
      linear_forward<<<blocks(batch * out_dim), threads, 0, stream>>>(xq.deq.data(), wq.deq.data(), y.data());
      check_launch("linear_forward");
    }
    mse_grad<<<blocks(batch * out_dim), threads, 0, stream>>>(y.data(), target.data(), dy.data(), loss.data());
    check_launch("mse_grad");
    {  // backward: leaving the scope flushes the backward update (one launch)
      auto scope = m.backward_scope();
      {
        auto replay = m.checkpoint_replay(frame);  // same scales as the original forward, no amax recorded
        cast(m, be, x_slot, x.data(), batch * in_dim, xr);
        cast(m, be, w_slot, w.data(), out_dim * in_dim, wr);
      }
      cast(m, be, dy_slot, dy.data(), batch * out_dim, dyq);
      m.request_backward_update();
      sgd_step<<<blocks(out_dim * in_dim), threads, 0, stream>>>(xr.deq.data(), dyq.deq.data(), w.data(), 1.0f);
      check_launch("sgd_step");
    }

    // Reading back synchronises: only for printing.
    const float l = be.read(loss.data());
    if (step == 0) first_loss = l;
    last_loss = l;
    const tequant::manager_stats st = m.stats();
    std::printf("%5d %12.6f %9llu %9llu %12.4g %12.4g %12.4g\n", step, static_cast<double>(l),
                static_cast<unsigned long long>(st.forward_updates), static_cast<unsigned long long>(st.backward_updates),
                static_cast<double>(m.scale(x_slot)), static_cast<double>(m.scale(w_slot)),
                static_cast<double>(m.scale(dy_slot)));
  }
  tequant::detail::check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  tequant::detail::check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  const tequant::manager_stats st = m.stats();
  const bool one_each = st.forward_updates == static_cast<std::uint64_t>(steps) &&
                        st.backward_updates == static_cast<std::uint64_t>(steps);
  const bool learned = steps < 10 || last_loss < 0.05f * first_loss;
  std::printf("loss %.6f -> %.6f (%s); updates per step: %s\n", static_cast<double>(first_loss),
              static_cast<double>(last_loss), learned ? "learned" : "DID NOT LEARN",
              one_each ? "1 forward / 1 backward" : "WRONG");
  return learned && one_each ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 40;
  if (steps <= 0) {
    std::fprintf(stderr, "usage: cuda_training [steps > 0]\n");
    return 2;
  }
  if (tequant::cuda_device_count() == 0) {
    std::printf("cuda_training: no CUDA device available here; this example needs a GPU, nothing to do.\n");
    return 0;
  }
  try {
    return run(steps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_training: %s\n", e.what());
    return 1;
  }
}
