// SPDX-License-Identifier: Apache-2.0
// What the manager's bookkeeping costs (issue 4): a 100-module training step driven through the manager
// beside the same sequence written by hand, for each boundary policy, and request_backward_update().
//
// One step = autocast region { per module: module_forward, 3 forward casts } (forward update at the exit),
// then a backward in reverse order { per module: 2 backward casts, request }, then the boundary flush.
// Variants:
//   bookkeeping  a cast is plan_cast + one max-accumulate of a synthetic amax into the staging slot
//   casts        a cast also quantizes a 1024-element fp32 tensor with the host backend
// by_hand: the same casts with pointers into two delayed_bucket objects, a bool for "pending", direct
// update calls. Ratio = manager / by_hand (target <= 1.05).
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

namespace {

constexpr int modules = 100;
constexpr std::size_t tensor_elems = 1024;

/// An engine inside one backward task whose end the benchmark triggers.
struct bench_task {
  void (*fn)(void*) = nullptr;
  void* ctx = nullptr;
  bool in_task = false;
};
struct bench_hooks {
  bench_task* t;
  bool in_backward() const noexcept { return t->in_task; }
  bool queue_callback(void (*fn)(void*), void* ctx) noexcept {
    t->fn = fn;
    t->ctx = ctx;
    return true;
  }
  void end_task() const {
    t->in_task = false;
    if (t->fn) {
      auto fn = t->fn;
      t->fn = nullptr;
      fn(t->ctx);
    }
  }
};
using callback = tequant::engine_callback<bench_hooks>;

struct tensors {
  std::vector<float> x = std::vector<float>(tensor_elems);
  std::vector<std::uint8_t> q = std::vector<std::uint8_t>(tensor_elems);
  tensors() {
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 97) - 48) * 0.125f;
  }
};

// Not inlined: both sides must run the very same machine code for the cast itself.
template <bool Casts>
[[gnu::noinline]] void do_cast(const tequant::host_backend& be, tensors& t, const float* scale, float* amax, tequant::fp8_dtype d,
                    float synthetic) {
  if constexpr (Casts) {
    float scale_inv;
    be.quantize_tensor(t.x.data(), t.x.size(), scale, d, t.q.data(), &scale_inv, amax);
    benchmark::DoNotOptimize(t.q.data());
  } else {
    be.max_accumulate(amax, synthetic);
  }
}

template <class Boundary>
Boundary make_boundary(bench_task& task) {
  if constexpr (std::is_same_v<Boundary, callback>) return callback{bench_hooks{&task}};
  else return Boundary{};
}

template <class Boundary, bool Casts>
void bm_manager_step(benchmark::State& st) {
  bench_task task;
  using M = tequant::quantization_manager<tequant::delayed_scaling<>, Boundary, tequant::no_recompute>;
  M m({}, make_boundary<Boundary>(task));
  // A module looks its slots up once, at registration (as TE modules hold their quantizers).
  std::vector<tequant::module_handle> h;
  std::vector<tequant::slot_id> fs, bs;
  for (int i = 0; i < modules; ++i) {
    h.push_back(m.register_module("m"));
    for (auto r : {tequant::forward_role::input, tequant::forward_role::weight, tequant::forward_role::output})
      fs.push_back(m.slot(h.back(), r));
    for (auto r : {tequant::backward_role::grad_output, tequant::backward_role::grad_input})
      bs.push_back(m.slot(h.back(), r));
  }
  tensors t;
  const auto& be = m.backend();
  float amax = 1.0f;
  for (auto _ : st) {
    {
      auto ac = m.autocast();
      for (int i = 0; i < modules; ++i) {
        (void)m.module_forward(h[i]);
        for (int k = 0; k < 3; ++k) {
          const auto p = m.plan_cast(fs[static_cast<std::size_t>(3 * i + k)]);
          do_cast<Casts>(be, t, p.scale, p.amax, p.dtype, amax);
        }
      }
    }
    auto backward = [&] {
      for (int i = modules - 1; i >= 0; --i) {
        for (int k = 0; k < 2; ++k) {
          const auto p = m.plan_cast(bs[static_cast<std::size_t>(2 * i + k)]);
          do_cast<Casts>(be, t, p.scale, p.amax, p.dtype, amax);
        }
        m.request_backward_update();
      }
    };
    if constexpr (std::is_same_v<Boundary, tequant::explicit_scope>) {
      auto s = m.backward_scope();
      backward();
    } else if constexpr (std::is_same_v<Boundary, callback>) {
      task.in_task = true;
      backward();
      bench_hooks{&task}.end_task();
    } else {
      backward();  // flushed at the next iteration's autocast entry
    }
    amax = amax < 64.0f ? amax * 1.5f : 1.0f;
  }
  m.flush_backward_update();
  if (m.stats().forward_updates != static_cast<std::uint64_t>(st.iterations()) ||
      m.stats().backward_updates != static_cast<std::uint64_t>(st.iterations()))
    st.SkipWithError("update counts are not one per step");
  st.SetItemsProcessed(st.iterations() * modules);
}

template <bool Casts>
void bm_by_hand_step(benchmark::State& st) {
  tequant::host_backend be;
  const tequant::delayed_params params;
  tequant::delayed_bucket<tequant::host_backend> fwd(params.history_length), bwd(params.history_length);
  for (int i = 0; i < modules; ++i) {
    for (int k = 0; k < 3; ++k) (void)fwd.add_slot();
    for (int k = 0; k < 2; ++k) (void)bwd.add_slot();
  }
  using R = tequant::delayed_scaling<>;
  const auto fwd_args = R::update_args(params, tequant::direction::forward);
  const auto bwd_args = R::update_args(params, tequant::direction::backward);
  const auto fd = R::dtype(params, tequant::direction::forward), bd = R::dtype(params, tequant::direction::backward);
  tensors t;
  float amax = 1.0f;
  bool pending = false;
  for (auto _ : st) {
    for (int i = 0; i < modules; ++i)
      for (std::uint32_t k = 0; k < 3; ++k) {
        const std::uint32_t j = static_cast<std::uint32_t>(3 * i) + k;
        do_cast<Casts>(be, t, fwd.scale_ptr(j), fwd.staging_ptr(j), fd, amax);
      }
    fwd.update(R::algo_type{}, fwd_args);
    for (int i = modules - 1; i >= 0; --i) {
      for (std::uint32_t k = 0; k < 2; ++k) {
        const std::uint32_t j = static_cast<std::uint32_t>(2 * i) + k;
        do_cast<Casts>(be, t, bwd.scale_ptr(j), bwd.staging_ptr(j), bd, amax);
      }
      benchmark::DoNotOptimize(pending = true);
    }
    if (pending) {
      pending = false;
      bwd.update(R::algo_type{}, bwd_args);
    }
    amax = amax < 64.0f ? amax * 1.5f : 1.0f;
  }
  st.SetItemsProcessed(st.iterations() * modules);
}

/// The common path: a request while the update is already pending (and, for engine_callback, queued).
template <class Boundary>
void bm_request(benchmark::State& st) {
  bench_task task{nullptr, nullptr, true};
  using M = tequant::quantization_manager<tequant::delayed_scaling<>, Boundary, tequant::no_recompute>;
  M m({}, make_boundary<Boundary>(task));
  (void)m.register_module("m");
  auto run = [&] {
    m.request_backward_update();  // the first request queues / marks
    for (auto _ : st) {
      m.request_backward_update();
      benchmark::ClobberMemory();
    }
  };
  if constexpr (std::is_same_v<Boundary, tequant::explicit_scope>) {
    auto s = m.backward_scope();
    run();
  } else {
    run();
  }
  st.SetItemsProcessed(st.iterations());
}

}  // namespace

BENCHMARK_TEMPLATE(bm_by_hand_step, false)->Name("step100/bookkeeping/by_hand");
BENCHMARK_TEMPLATE(bm_manager_step, callback, false)->Name("step100/bookkeeping/engine_callback");
BENCHMARK_TEMPLATE(bm_manager_step, tequant::autocast_entry, false)->Name("step100/bookkeeping/autocast_entry");
BENCHMARK_TEMPLATE(bm_manager_step, tequant::explicit_scope, false)->Name("step100/bookkeeping/explicit_scope");
BENCHMARK_TEMPLATE(bm_by_hand_step, true)->Name("step100/casts/by_hand");
BENCHMARK_TEMPLATE(bm_manager_step, callback, true)->Name("step100/casts/engine_callback");
BENCHMARK_TEMPLATE(bm_manager_step, tequant::autocast_entry, true)->Name("step100/casts/autocast_entry");
BENCHMARK_TEMPLATE(bm_manager_step, tequant::explicit_scope, true)->Name("step100/casts/explicit_scope");
BENCHMARK_TEMPLATE(bm_request, callback)->Name("request/engine_callback");
BENCHMARK_TEMPLATE(bm_request, tequant::autocast_entry)->Name("request/autocast_entry");
BENCHMARK_TEMPLATE(bm_request, tequant::explicit_scope)->Name("request/explicit_scope");

BENCHMARK_MAIN();
