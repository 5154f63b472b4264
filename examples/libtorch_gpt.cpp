// SPDX-License-Identifier: Apache-2.0
// The character-level GPT of examples/gpt, written with libtorch modules: token and position
// embeddings, pre-LayerNorm blocks (causal multi-head self-attention, GELU MLP), an output head. The
// four GEMMs of each block (QKV, attention output, MLP up and down) are tequant::quantized_linear, so their
// input, weight and grad_output are cast through the manager's recipe; embeddings, LayerNorm, softmax
// attention, the head and the loss stay FP32. Each block is a tequant::checkpoint (recomputed in the
// backward). Trained twice on the frozen corpus of examples/gpt (the same split): FP32, then FP8.
// With --ranks N (or --rendezvous), data-parallel over one c10d/Gloo process group, as gpt_mpi.
//
//   libtorch_gpt [the flags of examples/gpt that apply] [--seed N] [--threads N]   (--help lists them)
#include "tequant/integration/libtorch.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <exception>
#include <filesystem>
#include <functional>
#include <limits>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpt/checksum.hpp"
#include "gpt/corpus.hpp"
#include "gpt/report.hpp"
#include "gpt/options.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/boundary/first_module_owner.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/block.hpp"
#include "tequant/recipe/current.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/mxfp8.hpp"
#include "tequant/recipe/nvfp4.hpp"

#if TEQUANT_GPT_RANKS  // libtorch with c10d/Gloo (libtorch_gpt.cmake): --ranks and --rendezvous
#include "c10d_ranks.hpp"
#include "tequant/integration/c10d_comm.hpp"
#endif

namespace {

using tensors = torch::autograd::variable_list;
constexpr std::size_t validation_windows = 16;  // as examples/gpt

/// What libtorch_gpt takes on top of examples/gpt's options.
struct extra_options {
  std::uint32_t seed = 1234;
  // libtorch's OpenMP workers spin at barriers: on 2 cores shared with other work (load 9-13), a
  // 2-thread run of the test size did not finish in 10 minutes; a 1-thread run takes about 8 s.
  int threads = 1;
  // Several ranks (data parallelism over one Gloo process group; see run_rank).
  int ranks = 0;                // --ranks N: start N local ranks (0: the one-process FP32-vs-FP8 run)
  std::string rendezvous;       // tcp://HOST:PORT or env: this process is rank --rank of --world
  int rank = -1, world = 0;
  std::string address;          // this rank's Gloo address
  bool tcp_store = false;       // --store tcp: local ranks meet through a TCPStore (default: FileStore)
  int timeout_s = 60;           // of every collective and of the rendezvous
  bool compare = false;         // also train in one process over the same global batches
  int diverge_step = 0, die_step = 0, stall_step = 0;  // test switches: rank 1 misbehaves at that step
  bool distributed() const { return ranks > 0 || !rendezvous.empty(); }
};

constexpr const char* usage =
    "usage: libtorch_gpt [--recipe delayed|current|mxfp8|block|nvfp4] [--boundary engine|autocast|scope|first-module]\n"
    "                    [--recompute none|reentrant|nested] [--steps N] [--layers N] [--d-model N] [--heads N]\n"
    "                    [--context N] [--batch N] [--micro-batches N] [--eval-every N] [--lr X] [--sample N]\n"
    "                    [--data FILE] [--out DIR] [--fp8-only] [--quiet] [--seed N] [--threads N] [--help]\n"
    "                    [--ranks N | --rendezvous tcp://HOST:PORT|env --rank R --world W] [--compare]\n"
    "                    [--timeout S] [--store file|tcp] [--address A]\n"
    "                    [--debug-diverge STEP] [--debug-die-at STEP] [--debug-stall-at STEP]\n"
    "\n"
    "The GPT of examples/gpt on libtorch: trains it in FP32, then with every GEMM operand of its QKV,\n"
    "attention output and MLP projections through tequant::quantized_linear, each block a tequant::checkpoint,\n"
    "and compares their validation losses. The flags mean what they mean for `gpt` (defaults: 2 layers,\n"
    "d_model 128, 4 heads, context 64, batch 16, 150 steps); --boundary applies to the delayed recipe (the\n"
    "others keep no state to update). Also:\n"
    "  --seed     seed of the initial weights, the batches and the sample (default 1234)\n"
    "  --threads  libtorch's intra-op threads (default 1; more help only on otherwise idle cores)\n"
    "\n"
    "Several ranks (data parallelism over one c10d Gloo process group; --batch is the global batch, a\n"
    "multiple of the ranks, each rank trains on its contiguous batch/ranks sequences of it):\n"
    "  --ranks N        start N local ranks of this program (they meet through a FileStore in a fresh\n"
    "                   temporary directory; --store tcp: a TCPStore that the launcher serves)\n"
    "  --rendezvous tcp://HOST:PORT --rank R --world W\n"
    "                   be rank R of W ranks started elsewhere; rank 0 serves a TCPStore at HOST:PORT\n"
    "                   (--rendezvous env: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, as torchrun sets)\n"
    "  --address A      this rank's address for Gloo (default: the host name's; or $GLOO_SOCKET_IFNAME)\n"
    "  --timeout S      a collective or the rendezvous that waits longer than S seconds fails (default 60)\n"
    "  --compare        also train in one process over the same global batches (on rank 0) and print the\n"
    "                   largest relative loss difference\n"
    "  --debug-diverge STEP   rank 1 registers one module more at STEP: the layout check stops every rank\n"
    "  --debug-die-at STEP    rank 1 is killed (SIGKILL) after the forward of STEP\n"
    "  --debug-stall-at STEP  rank 1 stops after the forward of STEP: the others time out\n";

// ---- the model --------------------------------------------------------------------------------------

// example-begin libtorch_gpt_block
/// Pre-LayerNorm block: h + attn_out(attention(qkv(ln1(h)))), then + mlp_down(gelu(mlp_up(ln2(.)))).
template <class Manager>
struct block_module : torch::nn::Module {
  using linear = tequant::quantized_linear<Manager>;

  block_module(Manager& mgr, const std::string& prefix, std::int64_t d, std::int64_t n_heads)
      : heads(n_heads),
        ln1(register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        ln2(register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})))),
        qkv(register_module("qkv", std::make_shared<linear>(mgr, prefix + "qkv", d, 3 * d))),
        proj(register_module("attn_out", std::make_shared<linear>(mgr, prefix + "attn_out", d, d))),
        fc1(register_module("mlp_up", std::make_shared<linear>(mgr, prefix + "mlp_up", d, 4 * d))),
        fc2(register_module("mlp_down", std::make_shared<linear>(mgr, prefix + "mlp_down", 4 * d, d))) {}

  torch::Tensor forward(const torch::Tensor& h) {  // h: [B, T, d]
    const std::int64_t B = h.size(0), T = h.size(1), d = h.size(2), hd = d / heads;
    // [B, T, 3d] -> q, k, v as [B, heads, T, hd]; softmax attention in FP32
    const auto parts = qkv->forward(ln1(h)).view({B, T, 3, heads, hd}).permute({2, 0, 3, 1, 4});
    const torch::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);
    const torch::Tensor weights = torch::matmul(parts[0], parts[1].transpose(-2, -1))
                                      .div(std::sqrt(static_cast<double>(hd)))
                                      .masked_fill(future, -std::numeric_limits<float>::infinity())
                                      .softmax(-1);
    const torch::Tensor attended = torch::matmul(weights, parts[2]).transpose(1, 2).reshape({B, T, d});
    const torch::Tensor a = h + proj->forward(attended);
    return a + fc2->forward(torch::gelu(fc1->forward(ln2(a))));
  }

  std::int64_t heads;
  torch::nn::LayerNorm ln1, ln2;
  std::shared_ptr<linear> qkv, proj, fc1, fc2;  // the quantized GEMMs
};
// example-end

template <class Manager>
struct gpt_model : torch::nn::Module {
  gpt_model(Manager& mgr, const gpt::options& o, std::int64_t vocab) : mgr(mgr), rc(o.rc) {
    const std::int64_t d = o.d_model;
    tok = register_module("tok", torch::nn::Embedding(vocab, d));
    pos = register_parameter("pos", torch::empty({o.context, d}));
    for (int b = 0; b < o.layers; ++b) {
      const std::string p = "block" + std::to_string(b) + ".";
      blocks.push_back(register_module("block" + std::to_string(b), std::make_shared<block_module<Manager>>(mgr, p, d, o.heads)));
    }
    lnf = register_module("lnf", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(d, vocab).bias(false)));
    torch::NoGradGuard no_grad;  // the initialisation of examples/gpt
    tok->weight.normal_(0.0, 0.02);
    pos.normal_(0.0, 0.02);
    head->weight.normal_(0.0, 1.0 / std::sqrt(static_cast<double>(d)));
  }

  // example-begin libtorch_gpt_forward
  /// Logits [B*T, vocab] for ids [B, T].
  torch::Tensor forward(const torch::Tensor& ids) {
    const std::int64_t T = ids.size(1);
    torch::Tensor h = tok(ids) + pos.narrow(0, 0, T);
    const std::size_t n = blocks.size();
    for (std::size_t b = 0; b < n;) {
      if (rc == gpt::recompute::nested && b + 1 < n) {
        // a checkpoint of two blocks whose blocks are checkpoints too (replays inside a replay)
        auto pair = [this, b](const tensors& v) { return tensors{one_block(b + 1, one_block(b, v[0]))}; };
        h = tequant::checkpoint(mgr, pair, {h}, tequant::checkpoint_mode::reentrant,
                                "blocks" + std::to_string(b) + "-" + std::to_string(b + 1))[0];
        b += 2;
      } else {
        h = one_block(b, h);
        b += 1;
      }
    }
    return head(lnf(h)).view({-1, head->weight.size(0)});
  }

  torch::Tensor one_block(std::size_t b, const torch::Tensor& x) {
    if (rc == gpt::recompute::none) return blocks[b]->forward(x);
    auto body = [this, b](const tensors& v) { return tensors{blocks[b]->forward(v[0])}; };
    return tequant::checkpoint(mgr, body, {x}, tequant::checkpoint_mode::reentrant, "block" + std::to_string(b))[0];
  }
  // example-end

  Manager& mgr;
  gpt::recompute rc;
  torch::nn::Embedding tok{nullptr};
  torch::Tensor pos;
  std::vector<std::shared_ptr<block_module<Manager>>> blocks;
  torch::nn::LayerNorm lnf{nullptr};
  torch::nn::Linear head{nullptr};
};

// ---- training -------------------------------------------------------------------------------------

/// What a run on several ranks adds to train() (the defaults: one process, nothing to exchange).
/// Every rank draws the same global batches of --batch sequences and keeps its contiguous share.
template <class Comm>
struct data_parallel {
  int rank = 0, ranks = 1;
  std::function<Comm()> make_comm;  // the manager's comm policy (unset: Comm{})
  /// This rank's micro-batch losses -> every rank's, rank after rank (for the global mean).
  std::function<std::vector<float>(const std::vector<float>&)> gather_losses;
  /// After the backward, before the optimizer: sums the ranks' gradients (each rank's loss already
  /// carries the 1/ranks of the global mean, so the sum is the global batch's gradient).
  std::function<void(const std::vector<torch::Tensor>&)> sum_gradients;
  /// After each step: checksums of this rank's scaling state and of its weights.
  std::function<void(int step, std::uint64_t state, std::uint64_t weights)> after_step;
  std::function<void(int step)> after_forward;  // the test switches (a rank that dies or stalls)
  int extra_module_at_step = 0;                 // --debug-diverge: register one more module then

  Comm comm() const {
    if constexpr (std::is_default_constructible_v<Comm>)
      if (!make_comm) return Comm{};
    return make_comm();
  }
};

/// Every parameter's values, hashed (the checksum gpt_mpi's ranks compare, for libtorch tensors).
inline std::uint64_t weights_checksum(const std::vector<torch::Tensor>& params) {
  gpt::fnv1a h;
  for (const auto& p : params) {
    const torch::Tensor c = p.detach().contiguous();
    h.add(std::span<const float>(c.data_ptr<float>(), static_cast<std::size_t>(c.numel())));
  }
  return h.value();
}

struct run_result {
  std::vector<float> train_loss;  // per step (mean over the micro-batches)
  std::vector<int> val_step;
  std::vector<float> val_loss;
  std::vector<std::uint64_t> forward_updates, backward_updates;  // per step
  bool stateful = false;
  float scale_lo[3] = {0, 0, 0}, scale_hi[3] = {0, 0, 0};  // per role (input, weight, grad_output)
  bool scale_seen = false;
  std::string sample;
  double seconds = 0.0, tokens_per_second = 0.0;
};

torch::Tensor ids_tensor(const std::vector<std::uint32_t>& ids, std::int64_t rows) {
  std::vector<std::int64_t> v(ids.begin(), ids.end());
  return torch::from_blob(v.data(), {static_cast<std::int64_t>(v.size())}, torch::kLong).clone().view({rows, -1});
}

template <class Manager>
float validation_loss(Manager& mgr, gpt_model<Manager>& net, const gpt::corpus::batch_ids& v, bool fp8) {
  torch::NoGradGuard no_grad;                            // before the region: no forward update at its exit
  tequant::libtorch_autocast<Manager> region(mgr, fp8);
  const auto rows = static_cast<std::int64_t>(validation_windows);
  return torch::nn::functional::cross_entropy(net.forward(ids_tensor(v.x, rows)), ids_tensor(v.y, rows).view({-1}))
      .template item<float>();
}

/// Characters sampled (temperature 0.8) from the model, starting from the validation text; the window
/// is repeated so that the rows fill whole 32-row blocks (MXFP8 casts need that).
template <class Manager>
std::string sample_text(Manager& mgr, gpt_model<Manager>& net, const gpt::corpus& c, std::size_t T, int n, bool fp8,
                        std::uint32_t seed) {
  std::mt19937 rng(seed + 7);
  const std::size_t copies = 32 / std::gcd(T, std::size_t(32));
  std::vector<std::uint32_t> ctx(c.validation_ids().begin(), c.validation_ids().begin() + std::ptrdiff_t(T));
  std::string out;
  torch::NoGradGuard no_grad;
  for (int i = 0; i < n; ++i) {
    std::vector<std::uint32_t> ids;
    for (std::size_t k = 0; k < copies; ++k) ids.insert(ids.end(), ctx.begin(), ctx.end());
    torch::Tensor last;
    {
      tequant::libtorch_autocast<Manager> region(mgr, fp8);
      last = net.forward(ids_tensor(ids, static_cast<std::int64_t>(copies)))[static_cast<std::int64_t>(T) - 1];
    }
    const torch::Tensor p = (last / 0.8).softmax(0).to(torch::kDouble).contiguous();
    const double* pp = p.data_ptr<double>();
    const auto id = static_cast<std::uint32_t>(std::discrete_distribution<std::size_t>(pp, pp + p.numel())(rng));
    ctx.erase(ctx.begin());
    ctx.push_back(id);
    out.push_back(c.to_char(id));
  }
  return out;
}

/// Trains one model: quantized when `fp8`, FP32 otherwise (the same code; the region is disabled).
template <class Recipe, class Boundary, class Comm = tequant::single_process>
run_result train(const gpt::options& o, const extra_options& x, const gpt::corpus& data, bool fp8,
                 const data_parallel<Comm>& dp = {}) {
  using manager = tequant::quantization_manager<Recipe, Boundary, tequant::stacked_recompute, Comm>;
  manager mgr({}, {}, dp.comm());  // the recipe's default parameters, as examples/gpt
  const std::int64_t T = o.context, B = o.batch;
  // this rank's contiguous rows of a global batch of B sequences (all of them in one process)
  auto my_rows = [&, rows = B / dp.ranks](const std::vector<std::uint32_t>& ids) {
    return ids_tensor(ids, B).narrow(0, rows * dp.rank, rows);
  };
  torch::manual_seed(x.seed + 1);
  gpt_model<manager> net(mgr, o, static_cast<std::int64_t>(data.vocab()));
  // Adam (betas 0.9, 0.95) with linear warmup and cosine decay to 10% of the peak, as examples/gpt
  torch::optim::Adam opt(net.parameters(), torch::optim::AdamOptions(o.lr).betas(std::make_tuple(0.9, 0.95)).eps(1e-8));
  const int warm = std::max(1, std::min(20, o.steps / 10));
  std::mt19937 batch_rng(x.seed + 2);
  const gpt::corpus::batch_ids val = data.validation_batch(validation_windows, std::size_t(T));
  const int eval_every = o.eval_every > 0 ? o.eval_every : std::max(1, o.steps / 10);
  const bool scoped = std::is_same_v<Boundary, tequant::explicit_scope> || o.micro_batches > 1;

  run_result r;
  r.stateful = manager::is_stateful;
  std::vector<std::uint64_t> fwd_at{0}, bwd_at;
  const auto t0 = std::chrono::steady_clock::now();
  for (int step = 0; step < o.steps; ++step) {
    const int t = step + 1;
    const double progress = double(std::max(0, t - warm)) / double(std::max(1, o.steps - warm));
    const double lr = t <= warm ? o.lr * t / warm : o.lr * (0.1 + 0.45 * (1.0 + std::cos(3.14159265358979 * progress)));
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamOptions&>(g.options()).lr(lr);
    if (t == dp.extra_module_at_step) (void)mgr.register_module("debug_diverge.rank" + std::to_string(dp.rank));
    // example-begin libtorch_gpt_step
    tensors losses;
    {
      tequant::libtorch_autocast<manager> region(mgr, /*enabled=*/fp8);  // one forward update at its exit
      for (int mb = 0; mb < o.micro_batches; ++mb) {
        const auto b = data.train_batch(batch_rng, std::size_t(B), std::size_t(T));  // the global batch
        losses.push_back(torch::nn::functional::cross_entropy(net.forward(my_rows(b.x)), my_rows(b.y).reshape({-1})));
      }
    }
    if (dp.after_forward) dp.after_forward(t);
    bwd_at.push_back(mgr.stats().backward_updates);  // (for the report: updates per step)
    if (scoped) {
      auto scope = mgr.backward_scope();  // every micro-batch's backward is one logical backward
      for (const auto& loss : losses) (loss / (o.micro_batches * dp.ranks)).backward();
    } else {
      (losses[0] / dp.ranks).backward();  // engine_callback: a final callback on the engine flushes the update
    }
    if (dp.sum_gradients) dp.sum_gradients(net.parameters());  // several ranks: the global batch's gradient
    opt.step();
    opt.zero_grad();
    // example-end
    fwd_at.push_back(mgr.stats().forward_updates);
    std::vector<float> mb_loss;
    for (const auto& loss : losses) mb_loss.push_back(loss.template item<float>());
    if (dp.gather_losses) mb_loss = dp.gather_losses(mb_loss);  // rank after rank
    float mean = 0.0f;  // in the order one process with micro-batches * ranks micro-batches sums them
    for (int mb = 0; mb < o.micro_batches; ++mb)
      for (int k = 0; k < dp.ranks; ++k)
        mean += mb_loss[std::size_t(k * o.micro_batches + mb)] / float(o.micro_batches * dp.ranks);
    r.train_loss.push_back(mean);
    if (dp.after_step) dp.after_step(t, gpt::state_checksum(mgr), weights_checksum(net.parameters()));
    // the recipes that keep a scale per slot (NVFP4's state is its random streams: scales per cast)
    if constexpr (requires(const typename Recipe::template state_for<tequant::host_backend>& st) {
                    Recipe::scale(st, std::uint32_t{});
                  }) {
      if (fp8) {
        for (const auto& blk : net.blocks)
          for (const auto* l : {blk->qkv.get(), blk->proj.get(), blk->fc1.get(), blk->fc2.get()}) {
            const float s[3] = {mgr.scale(mgr.slot(l->handle(), tequant::forward_role::input)),
                                mgr.scale(mgr.slot(l->handle(), tequant::forward_role::weight)),
                                mgr.scale(mgr.slot(l->handle(), tequant::backward_role::grad_output))};
            for (int k = 0; k < 3; ++k) {
              r.scale_lo[k] = r.scale_seen ? std::min(r.scale_lo[k], s[k]) : s[k];
              r.scale_hi[k] = r.scale_seen ? std::max(r.scale_hi[k], s[k]) : s[k];
            }
            r.scale_seen = true;
          }
      }
    }
    if (t % eval_every == 0 || t == o.steps) {
      r.val_step.push_back(t);
      r.val_loss.push_back(validation_loss(mgr, net, val, fp8));
    }
    if (!o.quiet && (t % std::max(1, o.steps / 10) == 0 || t == o.steps)) {
      const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::printf("  %-4s step %5d/%d  train %.4f  val %.4f (step %d)  %7.0f tok/s  ETA %4.0fs\n", fp8 ? "fp8" : "fp32",
                  t, o.steps, double(mean), double(r.val_loss.empty() ? NAN : r.val_loss.back()),
                  r.val_step.empty() ? 0 : r.val_step.back(), double(t) * double(o.micro_batches * B * T) / dt,
                  dt / t * (o.steps - t));
      std::fflush(stdout);
    }
  }
  mgr.flush_backward_update();  // autocast_entry flushes a step's update at the next entry: the last one here
  bwd_at.push_back(mgr.stats().backward_updates);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.tokens_per_second = double(o.steps) * double(o.micro_batches * B * T) / r.seconds;
  for (int k = 0; k < o.steps; ++k) {
    r.forward_updates.push_back(fwd_at[std::size_t(k) + 1] - fwd_at[std::size_t(k)]);
    r.backward_updates.push_back(bwd_at[std::size_t(k) + 1] - bwd_at[std::size_t(k)]);
  }
  if (o.sample_chars > 0 && fp8) r.sample = sample_text(mgr, net, data, std::size_t(T), o.sample_chars, fp8, x.seed);
  return r;
}

/// The boundary decides when the backward update runs; only a stateful recipe (delayed) has one.
template <class Comm = tequant::single_process>
run_result train_any(const gpt::options& o, const extra_options& x, const gpt::corpus& data, bool fp8,
                     const data_parallel<Comm>& dp = {}) {
  using engine = tequant::engine_callback<tequant::libtorch_hooks>;
  switch (o.rec) {
    case gpt::recipe::delayed:
      switch (o.bnd) {
        case gpt::boundary::engine: return train<tequant::delayed_scaling<>, engine, Comm>(o, x, data, fp8, dp);
        case gpt::boundary::autocast: return train<tequant::delayed_scaling<>, tequant::autocast_entry, Comm>(o, x, data, fp8, dp);
        case gpt::boundary::scope: return train<tequant::delayed_scaling<>, tequant::explicit_scope, Comm>(o, x, data, fp8, dp);
        case gpt::boundary::first_module:
          return train<tequant::delayed_scaling<>, tequant::first_module_owner, Comm>(o, x, data, fp8, dp);
      }
      break;
    case gpt::recipe::current: return train<tequant::current_scaling, engine, Comm>(o, x, data, fp8, dp);
    case gpt::recipe::mxfp8: return train<tequant::mxfp8_scaling, engine, Comm>(o, x, data, fp8, dp);
    case gpt::recipe::block: return train<tequant::block_scaling, engine, Comm>(o, x, data, fp8, dp);
    case gpt::recipe::nvfp4: return train<tequant::nvfp4_scaling, engine, Comm>(o, x, data, fp8, dp);
  }
  return {};
}

// ---- the report -----------------------------------------------------------------------------------

int run(const gpt::options& o, const extra_options& x) {
  torch::set_num_threads(x.threads);
  const gpt::corpus data(o.data);
  std::printf("tequant GPT on libtorch %s: recipe=%s boundary=%s recompute=%s steps=%d micro-batches=%d threads=%d\n",
              TORCH_VERSION, gpt::name(o.rec), gpt::name(o.bnd), gpt::name(o.rc), o.steps, o.micro_batches, x.threads);
  std::printf("model: %d layers, d_model %d, %d heads, context %d, vocab %zu; batch %d x %d micro-batch%s = %d tokens/step\n",
              o.layers, o.d_model, o.heads, o.context, data.vocab(), o.batch, o.micro_batches,
              o.micro_batches == 1 ? "" : "es", o.batch * o.micro_batches * o.context);
  std::printf("data: %zu bytes (train %zu, validation %zu)\n", data.bytes(), data.train_size(), data.validation_size());
  run_result fp32;
  if (!o.fp8_only) fp32 = train_any(o, x, data, false);
  const run_result fp8 = train_any(o, x, data, true);

  std::map<std::pair<std::uint64_t, std::uint64_t>, int> per_step;
  int wrong = 0;
  std::uint64_t max_backward = 0;
  for (int k = 0; k < o.steps; ++k) {
    ++per_step[{fp8.forward_updates[std::size_t(k)], fp8.backward_updates[std::size_t(k)]}];
    wrong += fp8.forward_updates[std::size_t(k)] != 1 || fp8.backward_updates[std::size_t(k)] != 1;
    max_backward = std::max(max_backward, fp8.backward_updates[std::size_t(k)]);
  }
  const double l8 = fp8.val_loss.back(), l32 = o.fp8_only ? NAN : fp32.val_loss.back(), gap = (l8 - l32) / l32;
  const char* quantized = gpt::format_name(o.rec);
  const std::string gap_label = std::string("relative gap (") + quantized + " - FP32) / FP32";
  std::printf("\n%-36s %14s %14s\n", "", "FP32", quantized);
  std::printf("%-36s %14.4f %14.4f\n", "validation loss (final)", l32, l8);
  std::printf("%-36s %14.4f %14.4f\n", "train loss (last step)", o.fp8_only ? NAN : double(fp32.train_loss.back()),
              double(fp8.train_loss.back()));
  std::printf("%-36s %14s %+13.2f%%\n", gap_label.c_str(), "", 100.0 * gap);
  std::printf("%-36s %14s ", "updates per step (forward/backward)", "");
  if (!fp8.stateful) {
    std::printf("none: %s is stateless\n", gpt::name(o.rec));
  } else {
    bool first = true;
    for (const auto& [fb, count] : per_step) {
      std::printf("%s%llu/%llu on %d step%s", first ? "" : ", ", (unsigned long long)fb.first,
                  (unsigned long long)fb.second, count, count == 1 ? "" : "s");
      first = false;
    }
    std::printf("\n");
  }
  static const char* roles[] = {"input", "weight", "grad_output"};
  for (int role = 0; role < 3; ++role) {
    if (!fp8.scale_seen) {
      if (role == 0) std::printf("%-36s %14s computed per cast (%s keeps no scales)\n", "scale range (per role)", "",
                                 gpt::name(o.rec));
      continue;
    }
    std::printf("%-36s %14s %-11s %s .. %s\n", role == 0 ? "scale range after each step (per role)" : "", "",
                roles[role], gpt::pow2(fp8.scale_lo[role]).c_str(), gpt::pow2(fp8.scale_hi[role]).c_str());
  }
  std::printf("%-36s %13.1fs %13.1fs\n", "training time", fp32.seconds, fp8.seconds);
  std::printf("%-36s %14.0f %14.0f\n", "tokens/s", fp32.tokens_per_second, fp8.tokens_per_second);
  if (fp8.stateful && wrong != 0)
    std::printf("\n%d of %d steps did not get exactly one forward and one backward update.%s\n", wrong, o.steps,
                o.bnd == gpt::boundary::first_module
                    ? " This is TE's old \"first module owns the backward update\" rule: with recompute, the replayed\n"
                      "modules own it too and flush inside the nested backward. Use --boundary engine, scope or autocast."
                    : "");
  if (!fp8.sample.empty()) std::printf("\nsampled from the %s model:\n----\n%s\n----\n", quantized, fp8.sample.c_str());

  std::filesystem::create_directories(o.out);
  const std::string dir = std::filesystem::absolute(o.out).lexically_normal().string();
  gpt::write_loss_csv(dir + "/loss.csv", o.fp8_only ? nullptr : &fp32, fp8);
  std::printf("\nwrote %s/loss.csv\n", dir.c_str());
  std::printf("summary: recipe=%s boundary=%s recompute=%s val_fp32=%.4f val_fp8=%.4f gap_percent=%+.2f "
              "within_3_percent=%s updates_1_1=%s max_backward_updates_per_step=%llu\n",
              gpt::name(o.rec), gpt::name(o.bnd), gpt::name(o.rc), l32, l8, 100.0 * gap,
              o.fp8_only ? "n/a" : std::fabs(gap) <= 0.03 ? "yes" : "no",
              !fp8.stateful ? "n/a" : wrong == 0 ? "yes" : "no", (unsigned long long)max_backward);
  return 0;
}

#if TEQUANT_GPT_RANKS
// ---- several ranks --------------------------------------------------------------------------------

int failing_step = 0;  // the step in progress on this rank (what an error reports); 0 outside training

/// One rank of a data-parallel run: every rank trains on its share of each global batch, the
/// gradients are summed with one allreduce on the process group whose c10d_comm reduces the amaxes
/// (layout check on), and after every step rank 0 learns whether all ranks hold its scaling state
/// and weights bit for bit. Rank 0 reports (and with --compare trains one process beside it).
int run_rank(gpt::options o, const extra_options& x, const c10d_ranks::rendezvous& rv) {
  torch::set_num_threads(x.threads);
  const int rank = rv.rank, ranks = rv.world;
  if (o.batch % ranks != 0)
    throw gpt::bad_option("--batch " + std::to_string(o.batch) + " is the global batch: it must be a multiple of the " +
                          std::to_string(ranks) + " ranks (each rank trains on batch/ranks sequences of it)");
  const gpt::corpus data(o.data);
  const auto pg = c10d_ranks::connect(rv);
  if (rank != 0) {
    o.quiet = true;
    o.sample_chars = 0;
  }
  if (rank == 0) {
    std::printf("tequant GPT on libtorch %s, %d rank%s (c10d data parallel over %s): recipe=%s boundary=%s "
                "recompute=%s steps=%d threads=%d\n",
                TORCH_VERSION, ranks, ranks == 1 ? "" : "s", pg->getBackendName().c_str(), gpt::name(o.rec),
                gpt::name(o.bnd), gpt::name(o.rc), o.steps, x.threads);
    std::printf("model: %d layers, d_model %d, %d heads, context %d, vocab %zu; global batch %d = %d rank%s x %d "
                "sequences, %d micro-batch%s = %d tokens/step\n",
                o.layers, o.d_model, o.heads, o.context, data.vocab(), o.batch, ranks, ranks == 1 ? "" : "s",
                o.batch / ranks, o.micro_batches, o.micro_batches == 1 ? "" : "es", o.batch * o.micro_batches * o.context);
    std::printf("gradients: one Gloo allreduce; amaxes: tequant::c10d_comm with the layout check; time-out %d s%s\n",
                x.timeout_s, x.diverge_step > 0 ? "; --debug-diverge: rank 1 registers an extra module" : "");
    std::fflush(stdout);
  }

  int wrong_all = 0;  // rank-steps without exactly one forward and one backward update (FP8 run)
  double sum_seconds = 0.0;  // FP8 run: in the gradient sum, waiting for the slowest rank included
  auto distributed = [&](bool fp8, gpt::rank_checks& c) {
    data_parallel<tequant::c10d_comm> dp;
    dp.rank = rank;
    dp.ranks = ranks;
    dp.make_comm = [pg] { return tequant::c10d_comm(pg, tequant::comm_options{.check_layout = true}); };
    dp.gather_losses = [pg](const std::vector<float>& mine) {
      const torch::Tensor all = c10d_ranks::all_gather(
          *pg, torch::tensor(at::ArrayRef<float>(mine.data(), mine.size()), torch::kFloat), "losses");
      return std::vector<float>(all.data_ptr<float>(), all.data_ptr<float>() + all.numel());
    };
    dp.sum_gradients = [pg, fp8, &sum_seconds](const std::vector<torch::Tensor>& params) {
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<torch::Tensor> grads;
      for (const auto& p : params) grads.push_back(p.grad().defined() ? p.grad().reshape({-1}) : torch::zeros({p.numel()}));
      torch::Tensor flat = torch::cat(grads);  // one allreduce of every gradient, in parameter order
      c10d_ranks::all_reduce(*pg, flat, c10d::ReduceOp::SUM, "gradient sum");
      std::int64_t at = 0;
      for (const auto& p : params) {
        if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
        p.grad().copy_(flat.narrow(0, at, p.numel()).view_as(p.grad()));
        at += p.numel();
      }
      if (fp8) sum_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    dp.after_step = [&c, pg, rank](int step, std::uint64_t state, std::uint64_t weights) {
      const torch::Tensor mine = torch::tensor({std::bit_cast<std::int64_t>(state), std::bit_cast<std::int64_t>(weights)},
                                               torch::kLong);
      const torch::Tensor all = c10d_ranks::all_gather(*pg, mine, "state checksums");
      failing_step = step + 1;
      if (rank != 0) return;
      const torch::Tensor same = (all == mine.view({1, 2})).all(0);  // per column: every rank equals rank 0
      c.state.push_back(state);
      c.weights.push_back(weights);
      c.state_same.push_back(same[0].item<bool>());
      c.weights_same.push_back(same[1].item<bool>());
    };
    if (rank == 1) {
      dp.extra_module_at_step = x.diverge_step;
      dp.after_forward = [&x](int step) {
        if (step == x.die_step) {
          std::fprintf(stderr, "libtorch_gpt: rank 1: --debug-die-at %d: killing myself after the forward\n", step);
          std::fflush(stderr);
          std::raise(SIGKILL);
        }
        if (step == x.stall_step) {
          std::fprintf(stderr, "libtorch_gpt: rank 1: --debug-stall-at %d: stalling after the forward\n", step);
          std::fflush(stderr);
          std::this_thread::sleep_for(std::chrono::hours(1));
        }
      };
    }
    failing_step = 1;
    run_result r = train_any<tequant::c10d_comm>(o, x, data, fp8, dp);
    failing_step = 0;
    if (fp8 && r.stateful) {  // (the others wait here while rank 0 draws its sample)
      int wrong = 0;
      for (int k = 0; k < o.steps; ++k) wrong += r.forward_updates[std::size_t(k)] != 1 || r.backward_updates[std::size_t(k)] != 1;
      torch::Tensor w = torch::full({1}, wrong, torch::kInt);
      c10d_ranks::all_reduce(*pg, w, c10d::ReduceOp::SUM, "update counts");
      wrong_all = w.item<int>();
    }
    return r;
  };
  gpt::rank_checks c32, c8;
  run_result fp32;
  if (!o.fp8_only) fp32 = distributed(false, c32);
  const run_result fp8 = distributed(true, c8);
  pg->barrier()->wait();  // before any rank leaves (a peer still in a collective would see it go)
  if (rank != 0) return 0;

  gpt::print_ranks_summary(fp8, c8, o.fp8_only ? nullptr : &c32, o.steps, gpt::name(o.rec), wrong_all, sum_seconds);
  const int state_ok = c8.identical(c8.state_same), weights_ok = c8.identical(c8.weights_same);

  double diff8 = NAN, diff32 = NAN;
  if (x.compare) {
    // The same global batches in one process: a one-rank group, so every all-reduce is a no-op.
    gpt::options one = o;
    one.quiet = true;
    one.sample_chars = 0;
    std::printf("\ncomparing with 1 process over the same global batches of %d ...\n", o.batch);
    std::fflush(stdout);
    const c10d_ranks::temp_dir dir;
    data_parallel<tequant::c10d_comm> solo;
    const auto solo_pg = c10d_ranks::solo_group(dir.path());
    solo.make_comm = [solo_pg] { return tequant::c10d_comm(solo_pg); };
    const run_result ref8 = train_any<tequant::c10d_comm>(one, x, data, true, solo);
    const auto [d8, at8] = gpt::max_relative_difference(fp8.train_loss, ref8.train_loss);
    const auto [v8, vat8] = gpt::max_relative_difference(fp8.val_loss, ref8.val_loss);
    diff8 = std::max(d8, v8);
    std::printf("%-44s train %.3g (step %d), validation %.3g; loss.csv %s\n", "FP8: max relative loss difference", d8,
                at8, v8, fp8.train_loss == ref8.train_loss && fp8.val_loss == ref8.val_loss ? "identical" : "differs");
    if (!o.fp8_only) {
      const run_result ref32 = train_any<tequant::c10d_comm>(one, x, data, false, solo);
      const auto [d32, at32] = gpt::max_relative_difference(fp32.train_loss, ref32.train_loss);
      const auto [v32, vat32] = gpt::max_relative_difference(fp32.val_loss, ref32.val_loss);
      diff32 = std::max(d32, v32);
      std::printf("%-44s train %.3g (step %d), validation %.3g\n", "FP32: max relative loss difference", d32, at32, v32);
    }
    std::printf("%-44s %.1fs, %.0f tokens/s\n", "1-process FP8 run", ref8.seconds, ref8.tokens_per_second);
  }

  std::filesystem::create_directories(o.out);
  const std::string dir = std::filesystem::absolute(o.out).lexically_normal().string();
  gpt::write_loss_csv(dir + "/loss.csv", o.fp8_only ? nullptr : &fp32, fp8);
  gpt::write_ranks_csv(dir + "/ranks.csv", fp8, c8, fp8.stateful);
  std::printf("\nwrote %s/loss.csv and ranks.csv\n", dir.c_str());
  char cmp[128] = "n/a";
  if (x.compare)
    std::snprintf(cmp, sizeof cmp, "%.3g within_1e-4=%s within_1e-3=%s within_1e-2=%s fp32_max_rel_diff=%.3g",
                  diff8, diff8 <= 1e-4 ? "yes" : "no", diff8 <= 1e-3 ? "yes" : "no", diff8 <= 1e-2 ? "yes" : "no",
                  diff32);
  std::printf("summary: ranks=%d recipe=%s boundary=%s state_identical=%s weights_identical=%s updates_1_1=%s "
              "fp8_max_rel_diff=%s\n",
              ranks, gpt::name(o.rec), gpt::name(o.bnd), !fp8.stateful ? "n/a" : state_ok == o.steps ? "yes" : "no",
              weights_ok == o.steps ? "yes" : "no", !fp8.stateful ? "n/a" : wrong_all == 0 ? "yes" : "no", cmp);
  std::fflush(stdout);
  return 0;
}

/// --ranks N: start N local ranks; a rank started so, or by --rendezvous: run it.
int run_distributed(const gpt::options& o, const extra_options& x, char** argv) {
  const std::chrono::milliseconds timeout = std::chrono::seconds(x.timeout_s);
  std::optional<c10d_ranks::rendezvous> rv = c10d_ranks::spawned_rank(timeout);
  if (!rv && x.ranks > 0)  // the launcher: it trains nothing itself
    return c10d_ranks::launch(x.ranks, argv, "libtorch_gpt", x.tcp_store ? c10d_ranks::store_kind::tcp : c10d_ranks::store_kind::file,
                              timeout + std::chrono::seconds(10));
  if (!rv) {  // one rank of a job started elsewhere
    rv.emplace();
    rv->timeout = timeout;
    rv->address = x.address;
    if (x.rendezvous == "env") {
      auto env = [](const char* name) {
        const char* v = std::getenv(name);
        if (v == nullptr) throw gpt::bad_option(std::string("--rendezvous env: $") + name + " is not set");
        return std::string(v);
      };
      rv->rank = std::atoi(env("RANK").c_str());
      rv->world = std::atoi(env("WORLD_SIZE").c_str());
      c10d_ranks::parse_tcp("tcp://" + env("MASTER_ADDR") + ":" + env("MASTER_PORT"), *rv);
    } else {
      rv->rank = x.rank;
      rv->world = x.world;
      c10d_ranks::parse_tcp(x.rendezvous, *rv);
    }
    if (rv->world < 1 || rv->rank < 0 || rv->rank >= rv->world)
      throw gpt::bad_option("--rendezvous needs --rank R and --world W with 0 <= R < W, got rank " +
                            std::to_string(rv->rank) + " of " + std::to_string(rv->world));
    rv->serve_store = rv->rank == 0;
  }
  try {
    return run_rank(o, x, *rv);
  } catch (const gpt::bad_option&) {
    throw;
  } catch (const std::exception& e) {
    if (failing_step > 0)
      std::fprintf(stderr, "\nlibtorch_gpt: rank %d, step %d: error: %s\n", rv->rank, failing_step, c10d_ranks::first_line(e).c_str());
    else
      std::fprintf(stderr, "\nlibtorch_gpt: rank %d: error: %s\n", rv->rank, c10d_ranks::first_line(e).c_str());
    return 1;
  }
}
#endif  // TEQUANT_GPT_RANKS

/// Takes --seed and --threads out of argv (the rest goes to examples/gpt's parser) and refuses the
/// flags of examples/gpt that do not apply here.
std::vector<char*> take_extra(int argc, char** argv, extra_options& x) {
  std::vector<char*> rest{argv[0]};
  auto number = [&](int& i, std::string_view flag, long lo, long hi) {
    if (i + 1 >= argc) throw gpt::bad_option(std::string(flag) + " needs a value");
    const std::string v = argv[++i];
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < lo || n > hi)
      throw gpt::bad_option(std::string(flag) + " needs a whole number in [" + std::to_string(lo) + ", " +
                            std::to_string(hi) + "], got '" + v + "'");
    return n;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--seed") x.seed = static_cast<std::uint32_t>(number(i, a, 0, 1L << 30));
    else if (a == "--threads") x.threads = static_cast<int>(number(i, a, 1, 256));
    else if (a == "--ranks") x.ranks = static_cast<int>(number(i, a, 1, 1024));
    else if (a == "--rank") x.rank = static_cast<int>(number(i, a, 0, 1 << 20));
    else if (a == "--world") x.world = static_cast<int>(number(i, a, 1, 1 << 20));
    else if (a == "--timeout") x.timeout_s = static_cast<int>(number(i, a, 1, 86400));
    else if (a == "--debug-diverge") x.diverge_step = static_cast<int>(number(i, a, 1, 1 << 30));
    else if (a == "--debug-die-at") x.die_step = static_cast<int>(number(i, a, 1, 1 << 30));
    else if (a == "--debug-stall-at") x.stall_step = static_cast<int>(number(i, a, 1, 1 << 30));
    else if (a == "--compare") x.compare = true;
    else if (a == "--rendezvous" || a == "--address" || a == "--store") {
      if (i + 1 >= argc) throw gpt::bad_option(std::string(a) + " needs a value");
      const std::string v = argv[++i];
      if (a == "--rendezvous") x.rendezvous = v;
      else if (a == "--address") x.address = v;
      else if (v == "file" || v == "tcp") x.tcp_store = v == "tcp";
      else throw gpt::bad_option("unknown value '" + v + "' for --store (expected file or tcp)");
    }
    else if (a == "--no-cast-cache")
      throw gpt::bad_option("--no-cast-cache does not apply: the libtorch quantized_linear casts each weight at every use");
    else rest.push_back(argv[i]);
  }
  if (x.ranks > 0 && !x.rendezvous.empty())
    throw gpt::bad_option("--ranks starts local ranks, --rendezvous joins a job started elsewhere: give one of them");
  if (!x.distributed() && (x.compare || x.diverge_step > 0 || x.die_step > 0 || x.stall_step > 0 || x.rank >= 0 ||
                           x.world > 0 || x.tcp_store || !x.address.empty()))
    throw gpt::bad_option("--compare, --rank, --world, --store, --address and the --debug switches need --ranks or --rendezvous");
  if (x.rendezvous.empty() && (x.rank >= 0 || x.world > 0))
    throw gpt::bad_option("--rank and --world go with --rendezvous tcp://HOST:PORT (--ranks starts every rank itself)");
  if (x.ranks == 1 && (x.diverge_step > 0 || x.die_step > 0 || x.stall_step > 0))
    throw gpt::bad_option("the --debug switches make rank 1 misbehave: they need --ranks 2 or more");
  return rest;
}

}  // namespace

int main(int argc, char** argv) {
  gpt::options o;
  o.out = "tequant-libtorch-gpt-out";
  extra_options x;
  try {
    auto rest = take_extra(argc, argv, x);
    if (!gpt::parse(static_cast<int>(rest.size()), rest.data(), o)) {
      std::fputs(usage, stdout);
      return 0;
    }
  } catch (const gpt::bad_option& e) {
    std::fprintf(stderr, "libtorch_gpt: %s\n\n%s", e.what(), usage);
    return 2;
  }
  const int ranks = x.ranks > 0 ? x.ranks : x.world;
  if (x.distributed() && ranks > 0 && o.batch % ranks != 0) {
    std::fprintf(stderr, "libtorch_gpt: --batch %d is the global batch: it must be a multiple of the %d ranks (each "
                 "rank trains on batch/ranks sequences of it)\n", o.batch, ranks);
    return 2;
  }
  for (const int step : {x.diverge_step, x.die_step, x.stall_step})
    if (step > o.steps) {
      std::fprintf(stderr, "libtorch_gpt: a --debug step (%d) is after the last step (%d)\n", step, o.steps);
      return 2;
    }
  if (x.diverge_step > 0 && o.rec != gpt::recipe::delayed) {
    std::fprintf(stderr, "libtorch_gpt: --debug-diverge needs --recipe delayed (the only recipe here whose updates "
                 "reduce amaxes across ranks)\n");
    return 2;
  }
  try {
#if TEQUANT_GPT_RANKS
    if (x.distributed()) return run_distributed(o, x, argv);
#else
    if (x.distributed()) throw gpt::bad_option("--ranks and --rendezvous need libtorch with c10d/Gloo (not found at build time)");
#endif
    return run(o, x);
  } catch (const gpt::bad_option& e) {
    std::fprintf(stderr, "libtorch_gpt: %s\n", e.what());
    return 2;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "libtorch_gpt: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nlibtorch_gpt: error: %s\n", e.what());
    return 1;
  }
}
