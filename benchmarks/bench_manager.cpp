// SPDX-License-Identifier: Apache-2.0
// What the manager's bookkeeping costs (issue 4): a 100-module training step driven through the manager
// beside the same sequence written by hand, for each boundary policy, and request_backward_update().
//
// One step = autocast region { per module: module_forward, 3 forward casts } (forward update at the exit),
// then a backward in reverse order { per module: 2 backward casts, request }, then the boundary flush.
// Variants:
//   bookkeeping  a cast is plan_cast + one max-accumulate of a synthetic amax into the staging slot
//   casts        a cast also quantizes a 1024-element fp32 tensor with the host backend
// The manager cases cast through cast handles bound at registration (plan_cast(handle)). by_hand: the
// same casts with pointers into two delayed_bucket objects, a bool for "pending", direct update calls.
// Ratio = manager / by_hand (target <= 1.05). `bench_manager --steps=N --case=NAME` runs N steps of
// one step case and nothing else: scripts/instructions.sh counts their instructions.
#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
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
    // The plan's scale and dtype are what a module's kernel would read: both sides must produce them
    // (without this the compiler drops them from the twin's loop and from the manager's plan alike).
    benchmark::DoNotOptimize(scale);
    benchmark::DoNotOptimize(d);
    be.max_accumulate(amax, synthetic);
  }
}

template <class Boundary>
Boundary make_boundary(bench_task& task) {
  if constexpr (std::is_same_v<Boundary, callback>) return callback{bench_hooks{&task}};
  else return Boundary{};
}

/// One 100-module step through the manager. The cases are classes (set up once, step() per
/// iteration) so that scripts/instructions.sh can run a fixed number of steps under callgrind.
template <class Boundary, bool Casts>
class manager_case {
 public:
  manager_case() : m_({}, make_boundary<Boundary>(task_)) {
    // A module binds its slots once, at registration (as TE modules hold their quantizers); later
    // registrations start new epochs, so each handle re-binds once, at its first cast.
    for (int i = 0; i < modules; ++i) {
      h_.push_back(m_.register_module("m"));
      for (auto r : {tequant::forward_role::input, tequant::forward_role::weight, tequant::forward_role::output})
        fs_.push_back(m_.bind(h_.back(), r));
      for (auto r : {tequant::backward_role::grad_output, tequant::backward_role::grad_input})
        bs_.push_back(m_.bind(h_.back(), r));
    }
  }

  void step() {
    const auto& be = m_.backend();
    {
      auto ac = m_.autocast();
      for (int i = 0; i < modules; ++i) {
        (void)m_.module_forward(h_[static_cast<std::size_t>(i)]);
        for (int k = 0; k < 3; ++k) {
          const auto& p = m_.plan_cast(fs_[static_cast<std::size_t>(3 * i + k)]);
          do_cast<Casts>(be, t_, p.scale, p.amax, p.dtype, amax_);
        }
      }
    }
    auto backward = [&] {
      for (int i = modules - 1; i >= 0; --i) {
        for (int k = 0; k < 2; ++k) {
          const auto& p = m_.plan_cast(bs_[static_cast<std::size_t>(2 * i + k)]);
          do_cast<Casts>(be, t_, p.scale, p.amax, p.dtype, amax_);
        }
        m_.request_backward_update();
      }
    };
    if constexpr (std::is_same_v<Boundary, tequant::explicit_scope>) {
      auto s = m_.backward_scope();
      backward();
    } else if constexpr (std::is_same_v<Boundary, callback>) {
      task_.in_task = true;
      backward();
      bench_hooks{&task_}.end_task();
    } else {
      backward();  // flushed at the next step's autocast entry
    }
    amax_ = amax_ < 64.0f ? amax_ * 1.5f : 1.0f;
  }

  /// Whether `steps` steps made exactly one forward and one backward update each.
  bool one_update_per_step(std::uint64_t steps) {
    m_.flush_backward_update();
    return m_.stats().forward_updates == steps && m_.stats().backward_updates == steps;
  }

 private:
  using manager_type = tequant::quantization_manager<tequant::delayed_scaling<>, Boundary, tequant::no_recompute>;
  bench_task task_;
  manager_type m_;
  std::vector<tequant::module_handle> h_;
  std::vector<tequant::forward_cast_handle> fs_;
  std::vector<tequant::backward_cast_handle> bs_;
  tensors t_;
  float amax_ = 1.0f;
};

/// The same step by hand: two buckets, slot indices computed in place, a bool for "pending".
/// Checked: each slot's index is kept with a key, compared per cast with the trainer's current one
/// (a re-bind on a mismatch, which this step never takes): the check a cast handle makes so that a
/// registration, a disabled region or an open checkpoint frame never lets a kept plan be used. The
/// manager does this on purpose; this twin shows what the rest of its bookkeeping costs.
template <bool Casts, bool Checked = false>
class by_hand_case {
 public:
  by_hand_case() : fwd_(params_.history_length), bwd_(params_.history_length) {
    // Each module keeps its slots' indices, as the manager case keeps its slot ids (and TE modules
    // their quantizers): both sides look a slot up per cast.
    for (int i = 0; i < modules; ++i) {
      for (int k = 0; k < 3; ++k) fwd_slot_.push_back({fwd_.add_slot(), key_});
      for (int k = 0; k < 2; ++k) bwd_slot_.push_back({bwd_.add_slot(), key_});
    }
    // Pointers taken once, as a hand-written trainer would: no per-cast bounds check. The manager's
    // cast handles compare their key per cast instead (one load, a compare and a branch), which the
    // Checked twin does too.
    fwd_scale_ = fwd_.scale_data();
    bwd_scale_ = bwd_.scale_data();
    fwd_staging_ = fwd_.staging().data();
    bwd_staging_ = bwd_.staging().data();
    // A trainer's state is reachable from elsewhere (its modules live on the heap; the engine holds
    // them), as the manager's is (its boundary and its handles point at it). Without this the compiler
    // proves that nothing outside this object's loop can see it and keeps the twin's pointers in
    // registers across the opaque casts, which no real trainer gets.
    by_hand_case* self = this;
    benchmark::DoNotOptimize(self);
  }

  void step() {
    for (int i = 0; i < modules; ++i)
      for (std::uint32_t k = 0; k < 3; ++k) {
        const std::uint32_t j = index_of(fwd_slot_[static_cast<std::size_t>(3 * i) + k]);
        do_cast<Casts>(be_, t_, fwd_scale_ + j, fwd_staging_ + j, fd_, amax_);
      }
    fwd_.update(R::algo_type{}, fwd_args_);
    for (int i = modules - 1; i >= 0; --i) {
      for (std::uint32_t k = 0; k < 2; ++k) {
        const std::uint32_t j = index_of(bwd_slot_[static_cast<std::size_t>(2 * i) + k]);
        do_cast<Casts>(be_, t_, bwd_scale_ + j, bwd_staging_ + j, bd_, amax_);
      }
      benchmark::DoNotOptimize(pending_ = true);
    }
    if (pending_) {
      pending_ = false;
      bwd_.update(R::algo_type{}, bwd_args_);
    }
    amax_ = amax_ < 64.0f ? amax_ * 1.5f : 1.0f;
  }

  bool one_update_per_step(std::uint64_t) const { return true; }  // nothing to count: the updates are explicit

 private:
  struct bound_slot {
    std::uint32_t index;
    std::uint64_t key;  // key_ when bound (Checked only)
  };
  TEQUANT_ALWAYS_INLINE std::uint32_t index_of(bound_slot& b) {
    if constexpr (Checked) {
      if (b.key != key_) [[unlikely]]
        rebind(b);
    }
    return b.index;
  }
  [[gnu::noinline]] void rebind(bound_slot& b) { b.key = key_; }

  using R = tequant::delayed_scaling<>;
  tequant::host_backend be_;
  const tequant::delayed_params params_;
  tequant::delayed_bucket<tequant::host_backend> fwd_, bwd_;
  const tequant::delayed_update_args fwd_args_ = R::update_args(params_, tequant::direction::forward);
  const tequant::delayed_update_args bwd_args_ = R::update_args(params_, tequant::direction::backward);
  const tequant::fp8_dtype fd_ = R::dtype(params_, tequant::direction::forward);
  const tequant::fp8_dtype bd_ = R::dtype(params_, tequant::direction::backward);
  const float* fwd_scale_ = nullptr;
  const float* bwd_scale_ = nullptr;
  float* fwd_staging_ = nullptr;
  float* bwd_staging_ = nullptr;
  std::vector<bound_slot> fwd_slot_, bwd_slot_;
  std::uint64_t key_ = 1;
  tensors t_;
  float amax_ = 1.0f;
  bool pending_ = false;
};

template <class Case>
void bm_step(benchmark::State& st) {
  Case c;
  for (auto _ : st) c.step();
  if (!c.one_update_per_step(static_cast<std::uint64_t>(st.iterations())))
    st.SkipWithError("update counts are not one per step");
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

// The step cases by name: the benchmarks below, and `bench_manager --steps=N --case=NAME`, which runs
// N steps of one case and nothing else (scripts/instructions.sh counts their instructions).
template <class Case>
int run_steps(long steps) {
  Case c;
  for (long i = 0; i < steps; ++i) c.step();
  return c.one_update_per_step(static_cast<std::uint64_t>(steps)) ? 0 : 1;
}

struct step_case {
  const char* name;
  void (*bench)(benchmark::State&);
  int (*run)(long);
};

template <class Case>
constexpr step_case make_case(const char* name) {
  return {name, &bm_step<Case>, &run_steps<Case>};
}

constexpr step_case step_cases[] = {
    make_case<by_hand_case<false>>("step100/bookkeeping/by_hand"),
    make_case<by_hand_case<false, true>>("step100/bookkeeping/by_hand_checked"),
    make_case<manager_case<callback, false>>("step100/bookkeeping/engine_callback"),
    make_case<manager_case<tequant::autocast_entry, false>>("step100/bookkeeping/autocast_entry"),
    make_case<manager_case<tequant::explicit_scope, false>>("step100/bookkeeping/explicit_scope"),
    make_case<by_hand_case<true>>("step100/casts/by_hand"),
    make_case<manager_case<callback, true>>("step100/casts/engine_callback"),
    make_case<manager_case<tequant::autocast_entry, true>>("step100/casts/autocast_entry"),
    make_case<manager_case<tequant::explicit_scope, true>>("step100/casts/explicit_scope"),
};

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string_view(argv[1]).starts_with("--steps=") && std::string_view(argv[2]).starts_with("--case=")) {
    const long steps = std::atol(argv[1] + 8);
    const std::string_view name = argv[2] + 7;
    for (const auto& c : step_cases)
      if (name == c.name) return c.run(steps);
    std::fprintf(stderr, "bench_manager: no case '%.*s'\n", static_cast<int>(name.size()), name.data());
    return 2;
  }
  for (const auto& c : step_cases) benchmark::RegisterBenchmark(c.name, c.bench);
  benchmark::RegisterBenchmark("request/engine_callback", &bm_request<callback>);
  benchmark::RegisterBenchmark("request/autocast_entry", &bm_request<tequant::autocast_entry>);
  benchmark::RegisterBenchmark("request/explicit_scope", &bm_request<tequant::explicit_scope>);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
