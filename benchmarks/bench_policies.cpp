// SPDX-License-Identifier: Apache-2.0
// What each policy combination costs on a synthetic transformer-like training step (issue 9).
//
// One step = forward of N layers (one module each: 3 forward GEMM slots input/weight/output) inside
// one autocast region, then a backward in reverse order (2 backward slots grad_output/grad_input per
// layer, then a request). With stacked_recompute every layer is its own checkpoint: the forward opens
// a frame per layer and the backward replays the layer (3 forward casts with the snapshot scales,
// inside an autocast region, as TE's checkpoint does) before its backward casts.
//
// Variants per combination:
//   kernels     the host quantize kernels run on a 64x256 fp32 tensor per cast (what a user pays);
//   no_kernels  only the bookkeeping: plan_cast, and for delayed scaling one max-accumulate of a
//               synthetic amax into the staging slot (what the kernel would record), so that updates
//               do real work.
// Baselines in the same binary (same casts, same tensors):
//   floor       hand-written, no manager: direct pointers into the recipe state, a plain array of
//               snapshot scales, a bool for "pending", direct update calls;
//   te_style    TE's bookkeeping re-implemented in C++ (te_style_baseline.hpp).
// NVFP4 rows: the recipe's state is its gradients' random streams (stochastic rounding), so its twins
// keep the recipe's own state and plan through the recipe; the floor counts the manager's (empty)
// update per direction, TE-style none (TE keeps no fp8_meta for NVFP4; its bits come from torch's
// generator).
// Counters: snap_heap_B (heap growth over the forward of a steady-state step: memory held for the
// recompute; the manager's frames are fresh for that step so that their hash tables count too), snap_payload_B (snapshot scales / stashes counted from the state), snapshots (outstanding
// at the end of the forward), fwd_upd / bwd_upd (updates per step, checked), first_step_us (includes
// registration).
#include <benchmark/benchmark.h>
#include <malloc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "custom_policies/ema_current_scaling.hpp"
#include "custom_policies/every_k_backwards.hpp"
#include "te_style_baseline.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/backend/layouts.hpp"
#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/manager.hpp"
#include "tequant/quantized_tensor.hpp"
#include "tequant/recipe/block.hpp"
#include "tequant/recipe/current.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/mxfp8.hpp"
#include "tequant/recipe/nvfp4.hpp"

// ---- heap accounting (only while a probe tracks; the timed loops never track) ------------------------
namespace {
bool g_track = false;
std::int64_t g_live = 0;

void* counted_alloc(std::size_t n) {
  void* p = std::malloc(n == 0 ? 1 : n);
  if (p == nullptr) throw std::bad_alloc();
  if (g_track) g_live += static_cast<std::int64_t>(malloc_usable_size(p));
  return p;
}
void counted_free(void* p) noexcept {
  if (p != nullptr && g_track) g_live -= static_cast<std::int64_t>(malloc_usable_size(p));
  std::free(p);
}
}  // namespace

void* operator new(std::size_t n) { return counted_alloc(n); }
void* operator new[](std::size_t n) { return counted_alloc(n); }
void operator delete(void* p) noexcept { counted_free(p); }
void operator delete[](void* p) noexcept { counted_free(p); }
void operator delete(void* p, std::size_t) noexcept { counted_free(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_free(p); }

namespace {

using namespace tequant;

constexpr std::size_t rows = 64, cols = 256, elems = rows * cols;
constexpr std::uint32_t history_length = 1024;

enum class recompute { none, stacked };

/// What a measured step reports at the end of its forward (all snapshots outstanding).
struct probe {
  std::int64_t heap_growth = 0;
  std::size_t payload = 0, snapshots = 0;
  void begin() noexcept {
    g_live = 0;
    g_track = true;
  }
  void end(std::size_t payload_bytes, std::size_t outstanding) noexcept {
    g_track = false;
    heap_growth = g_live;
    payload = payload_bytes;
    snapshots = outstanding;
  }
};

/// The amax a cast would record (no_kernels): varies with step, layer and role so that the delayed
/// window sees changing values.
inline float synthetic_amax(std::uint32_t step, std::uint32_t layer, int role) noexcept {
  return 1.0f + static_cast<float>((step * 31u + layer * 7u + static_cast<std::uint32_t>(role)) % 17u) * 0.125f;
}

// ---- the casts: one tensor per role (5 roles), shared by every layer -----------------------------------

/// Whether R keeps per-bucket state: the manager then runs one update per direction per step.
template <class R>
inline constexpr bool stateful = detail::has_state<R, host_backend>;

/// Whether that state is delayed scaling's (scales, amax histories, a fused update): what the
/// hand-written twins and TE's bookkeeping then keep too. NVFP4's state is its gradients' random
/// streams instead: the twins keep the recipe's own state and plan through the recipe.
template <class R>
inline constexpr bool scale_state = stateful<R> && requires { typename R::algo_type; };

/// A hand-written twin's copy of the recipe's own state (one per direction) when it is not scales.
struct no_recipe_state {};
template <class R, bool Own = stateful<R> && !scale_state<R>>
struct twin_state_of {
  using type = no_recipe_state;
};
template <class R>
struct twin_state_of<R, true> {
  using type = typename R::template state_for<host_backend>;
};
template <class R>
using twin_state = typename twin_state_of<R>::type;

template <class R>
twin_state<R> make_twin_state(const typename R::params_type& p, std::uint32_t slots) {
  if constexpr (std::is_same_v<twin_state<R>, no_recipe_state>) {
    return {};
  } else {
    twin_state<R> st = R::make_state(p, host_backend{});
    for (std::uint32_t k = 0; k < slots; ++k) R::add_slot(st);
    return st;
  }
}

template <class R>
struct caster {
  host_backend backend{};
  std::array<std::vector<float>, 5> x;  // roles: 0 input, 1 weight, 2 output, 3 grad_output, 4 grad_input
  std::array<quantized_tensor<host_backend>, 5> out;
  bool kernels;

  explicit caster(bool with_kernels) : kernels(with_kernels) {
    std::uint32_t s = 12345u;
    for (int r = 0; r < 5; ++r) {
      x[static_cast<std::size_t>(r)].resize(elems);
      for (float& v : x[static_cast<std::size_t>(r)]) {
        s = s * 1664525u + 1013904223u;
        v = (static_cast<float>(s >> 8) / 16777216.0f - 0.5f) * static_cast<float>(1 << r);
      }
    }
  }

  /// Casts role `role` of layer `layer` in step `step`. Without kernels, the synthetic amax is made
  /// only where the plan records one (a replay's does not), on every side alike. Inlined on every side
  /// alike too (the kernels out of line): g++ otherwise inlined it into the floor's loop and not into
  /// the manager's, so that the two sides paid different call overheads for the same cast.
  [[gnu::always_inline]] inline void operator()(const cast_plan& plan, int role, std::uint32_t step,
                                                std::uint32_t layer) {
    if (!kernels) {
      if (plan.amax != nullptr) backend.max_accumulate(plan.amax, synthetic_amax(step, layer, role));
      benchmark::DoNotOptimize(plan);
      return;
    }
    run_kernel(plan, role);
  }

  [[gnu::noinline]] void run_kernel(const cast_plan& plan, int role) {
    auto& q = out[static_cast<std::size_t>(role)];
    q.prepare(backend, plan, rows, cols, true, false);  // keeps its storage: the sizes never change
    backend.quantize(matrix_view<const float>{x[static_cast<std::size_t>(role)].data(), rows, cols}, plan, q.output());
    benchmark::ClobberMemory();
  }
};

/// A hand-written twin's plan: the given pointers for scale state, the recipe's own otherwise (from the
/// twin's copy of its state when it keeps one).
template <class R>
cast_plan twin_plan(const typename R::params_type& p, direction d, std::uint32_t k, const float* scale, float* amax,
                    twin_state<R>& st) {
  if constexpr (scale_state<R>) return {scale, amax, R::dtype(p, d)};
  else if constexpr (stateful<R>) return R::plan(p, st, slot_id{d, 0, k});
  else return R::plan(p, slot_id{d, 0, k});
}

template <class R>
const char* recipe_name() {
  static const std::string n(R::name.substr(0, R::name.find('_')));  // "delayed_scaling" -> "delayed"
  return n.c_str();
}

template <class R>
typename R::params_type bench_params() {
  typename R::params_type p{};
  if constexpr (requires { p.history_length; }) p.history_length = history_length;
  return p;
}

// ---- engine_callback: a trivial engine whose one task queues callbacks into a vector -------------------

struct bench_engine {
  bool in_task = false;
  std::vector<std::pair<void (*)(void*), void*>> queued;
  void begin_task() noexcept { in_task = true; }
  void end_task() {
    in_task = false;
    for (std::size_t i = 0; i < queued.size(); ++i) queued[i].first(queued[i].second);
    queued.clear();
  }
};

struct bench_hooks {
  bench_engine* engine = nullptr;
  bool in_backward() const noexcept { return engine != nullptr && engine->in_task; }
  bool queue_callback(void (*fn)(void*), void* ctx) {
    if (!in_backward()) return false;
    engine->queued.emplace_back(fn, ctx);
    return true;
  }
};

struct engine_b {
  using type = engine_callback<bench_hooks>;
  static constexpr const char* name = "engine";
  static type make(bench_engine* e) { return type(bench_hooks{e}); }
};
struct autocast_b {
  using type = autocast_entry;
  static constexpr const char* name = "autocast";
  static type make(bench_engine*) { return {}; }
};
struct scope_b {
  using type = explicit_scope;
  static constexpr const char* name = "scope";
  static type make(bench_engine*) { return {}; }
};

/// A boundary policy written outside the library (examples/custom_policies), here flushing every
/// logical backward (k = 1) so that its update counts compare with the shipped ones.
struct every_k_b {
  using type = custom::every_k_backwards;
  static constexpr const char* name = "every_k1";
  static type make(bench_engine*) { return type(1); }
};

constexpr const char* recompute_name(recompute c) { return c == recompute::stacked ? "stacked" : "none"; }

// ---- the step through the manager ------------------------------------------------------------------

template <class R, class B, recompute C>
class manager_step {
  using checkpoint_t = std::conditional_t<C == recompute::stacked, stacked_recompute, no_recompute>;
  using manager_t = quantization_manager<R, typename B::type, checkpoint_t>;

 public:
  manager_step(std::uint32_t layers, bool kernels)
      : n_(layers), m_(bench_params<R>(), B::make(&engine_)), cast_(kernels) {
    make_frames();
  }

  void step(probe* p) {
    if (p) {
      // Fresh frames, so that the probe also counts what a frame keeps between steps (its hash table).
      make_frames();
      p->begin();
    }
    {
      auto region = m_.autocast();
      if (!registered_) register_modules();  // first step only
      for (std::uint32_t i = 0; i < n_; ++i) {
        if constexpr (C == recompute::stacked) {
          auto frame = m_.checkpoint_forward(*frames_[i]);
          forward_layer(i);
        } else {
          forward_layer(i);
        }
      }
    }  // forward update
    if (p) p->end(snapshot_payload(), m_.stats().outstanding_snapshots);
    engine_.begin_task();
    if constexpr (std::is_same_v<B, scope_b>) {
      auto scope = m_.backward_scope();
      backward_layers();
    } else {
      backward_layers();
    }
    engine_.end_task();  // engine_callback flushes here; autocast_entry at the next step's entry
    ++step_;
  }

  std::uint64_t forward_updates() const { return m_.stats().forward_updates; }
  std::uint64_t backward_updates() const { return m_.stats().backward_updates; }

 private:
  void make_frames() {
    frames_.clear();
    for (std::uint32_t i = 0; i < n_; ++i)
      frames_.push_back(std::make_unique<checkpoint_frame>("layer" + std::to_string(i)));
  }

  void register_modules() {
    for (std::uint32_t i = 0; i < n_; ++i) {
      const module_handle h = m_.register_module("layer" + std::to_string(i), 1);
      mods_.push_back(h);
      for (auto r : {forward_role::input, forward_role::weight, forward_role::output}) fwd_.push_back(m_.bind(h, r));
      for (auto r : {backward_role::grad_output, backward_role::grad_input}) bwd_.push_back(m_.bind(h, r));
    }
    registered_ = true;
  }

  void forward_layer(std::uint32_t i) {
    (void)m_.module_forward(mods_[i]);
    for (int r = 0; r < 3; ++r) cast_(m_.plan_cast(fwd_[3 * i + static_cast<std::uint32_t>(r)]), r, step_, i);
  }

  void backward_layers() {
    for (std::uint32_t i = n_; i-- > 0;) {
      if constexpr (C == recompute::stacked) {
        auto replay = m_.checkpoint_replay(*frames_[i]);
        auto region = m_.autocast();
        forward_layer(i);
      }
      for (int r = 0; r < 2; ++r)
        cast_(m_.plan_cast(bwd_[2 * i + static_cast<std::uint32_t>(r)]), 3 + r, step_, i);
      m_.request_backward_update();
    }
  }

  std::size_t snapshot_payload() const {
    std::size_t b = 0;
    for (const auto& f : frames_) b += f->snapshot_slots() * sizeof(float);
    return b;
  }

  std::uint32_t n_;
  bench_engine engine_;
  manager_t m_;
  caster<R> cast_;
  // One frame per layer, reached directly (as an engine's checkpoint node holds its own): a deque's
  // indexing cost more per layer than some of the bookkeeping measured here.
  std::vector<std::unique_ptr<checkpoint_frame>> frames_;
  std::vector<module_handle> mods_;
  // Cast handles, bound once at registration, as docs/api.md asks of a module (the floor's equivalent:
  // pointers straight into the recipe state).
  std::vector<forward_cast_handle> fwd_;
  std::vector<backward_cast_handle> bwd_;
  bool registered_ = false;
  std::uint32_t step_ = 0;
};

// ---- the floor: the same casts and updates, hand-written ---------------------------------------------

template <class R, recompute C>
class floor_step {
 public:
  floor_step(std::uint32_t layers, bool kernels) : n_(layers), cast_(kernels) {}

  void step(probe* p) {
    if (p) p->begin();
    if (!registered_) register_slots();
    for (std::uint32_t i = 0; i < n_; ++i)
      for (std::uint32_t r = 0; r < 3; ++r) {
        const std::uint32_t k = 3 * i + r;
        cast_plan plan;
        if constexpr (scale_state<R>) {
          plan = twin_plan<R>(params_, direction::forward, k, fwd_.scale_data() + k, fwd_.staging().data() + k,
                              rfwd_);
          if constexpr (C == recompute::stacked) snap_[k] = *plan.scale;
        } else {
          plan = twin_plan<R>(params_, direction::forward, k, nullptr, nullptr, rfwd_);
        }
        cast_(plan, static_cast<int>(r), step_, i);
      }
    if constexpr (scale_state<R>) fwd_.update(typename R::algo_type{}, R::update_args(params_, direction::forward));
    else if constexpr (stateful<R>) R::update(params_, direction::forward, std::span<twin_state<R>>(&rfwd_, 1));
    if (p) p->end(C == recompute::stacked && scale_state<R> ? snap_.size() * sizeof(float) : 0, 0);
    for (std::uint32_t i = n_; i-- > 0;) {
      if constexpr (C == recompute::stacked) {
        for (std::uint32_t r = 0; r < 3; ++r) {
          cast_plan plan = twin_plan<R>(params_, direction::forward, 3 * i + r, nullptr, nullptr, rfwd_);
          if constexpr (scale_state<R>) plan.scale = &snap_[3 * i + r];
          cast_(plan, static_cast<int>(r), step_, i);
        }
      }
      for (std::uint32_t r = 0; r < 2; ++r) {
        const std::uint32_t k = 2 * i + r;
        cast_plan plan;
        if constexpr (scale_state<R>)
          plan = twin_plan<R>(params_, direction::backward, k, bwd_.scale_data() + k, bwd_.staging().data() + k,
                              rbwd_);
        else
          plan = twin_plan<R>(params_, direction::backward, k, nullptr, nullptr, rbwd_);
        cast_(plan, 3 + static_cast<int>(r), step_, i);
      }
      pending_ = true;
    }
    if constexpr (stateful<R>) {
      if (pending_) {
        if constexpr (scale_state<R>)
          bwd_.update(typename R::algo_type{}, R::update_args(params_, direction::backward));
        else
          R::update(params_, direction::backward, std::span<twin_state<R>>(&rbwd_, 1));
        ++bwd_updates_;
      }
      ++fwd_updates_;
    }
    pending_ = false;
    ++step_;
  }

  std::uint64_t forward_updates() const { return fwd_updates_; }
  std::uint64_t backward_updates() const { return bwd_updates_; }

 private:
  struct no_state {
    explicit no_state(std::uint32_t) {}
  };
  using state_t = std::conditional_t<scale_state<R>, delayed_bucket<host_backend>, no_state>;

  void register_slots() {
    if constexpr (scale_state<R>) {
      for (std::uint32_t k = 0; k < 3 * n_; ++k) (void)fwd_.add_slot();
      for (std::uint32_t k = 0; k < 2 * n_; ++k) (void)bwd_.add_slot();
      snap_.assign(3 * n_, 0.0f);
    }
    registered_ = true;
  }

  std::uint32_t n_;
  typename R::params_type params_ = bench_params<R>();
  caster<R> cast_;
  state_t fwd_{history_length}, bwd_{history_length};
  twin_state<R> rfwd_ = make_twin_state<R>(params_, 3 * n_), rbwd_ = make_twin_state<R>(params_, 2 * n_);
  std::vector<float> snap_;
  bool registered_ = false, pending_ = false;
  std::uint32_t step_ = 0;
  std::uint64_t fwd_updates_ = 0, bwd_updates_ = 0;
};

// ---- TE's bookkeeping ------------------------------------------------------------------------------

template <class R, recompute C>
class te_step {
  static float scaled_max(direction d) {
    if constexpr (scale_state<R>) return R::update_args(bench_params<R>(), d).scaled_max;
    else return 0.0f;
  }

 public:
  te_step(std::uint32_t layers, bool kernels)
      : n_(layers),
        st_(history_length, scaled_max(direction::forward), scaled_max(direction::backward), scale_state<R>),
        cast_(kernels), rfwd_(make_twin_state<R>(params_, 3)), rbwd_(make_twin_state<R>(params_, 2)) {
    for (std::uint32_t i = 0; i < n_; ++i) (void)st_.add_module("layer" + std::to_string(i), 1);
  }

  void step(probe* p) {
    if (p) p->begin();
    const auto snap = st_.autocast_enter();
    for (std::uint32_t i = 0; i < n_; ++i) {
      if constexpr (C == recompute::stacked) st_.set_recompute(true, false);
      forward_layer(i);
      if constexpr (C == recompute::stacked) st_.set_recompute(false, false);
    }
    st_.autocast_exit(snap, true);
    if (p) p->end(st_.stash_bytes(), st_.outstanding_stashes());
    for (std::uint32_t i = n_; i-- > 0;) {
      if constexpr (C == recompute::stacked) {
        st_.set_recompute(true, true);
        const auto rs = st_.autocast_enter();
        forward_layer(i);
        st_.autocast_exit(rs, true);
        st_.set_recompute(false, false);
      }
      auto& m = st_.module(i);
      for (std::uint32_t r = 0; r < 2; ++r) {
        cast_plan plan = twin_plan<R>(params_, direction::backward, r, m.bwd.scale.data() + r, m.bwd.staging(r),
                                      rbwd_);
        cast_(plan, 3 + static_cast<int>(r), step_, i);
      }
      st_.end_backward(i);  // the owner (layer 0, last in backward) runs the backward update
    }
    ++step_;
  }

  std::uint64_t forward_updates() const { return st_.updates(direction::forward); }
  std::uint64_t backward_updates() const { return st_.updates(direction::backward); }

 private:
  void forward_layer(std::uint32_t i) {
    st_.prepare_forward(i);
    auto& m = st_.module(i);
    for (std::uint32_t r = 0; r < 3; ++r) {
      cast_plan plan = twin_plan<R>(params_, direction::forward, r, m.fwd.scale.data() + r, m.fwd.staging(r), rfwd_);
      cast_(plan, static_cast<int>(r), step_, i);
    }
    st_.end_forward(i);
  }

  std::uint32_t n_;
  typename R::params_type params_ = bench_params<R>();
  te_style::state_manager st_;
  caster<R> cast_;
  twin_state<R> rfwd_, rbwd_;  // NVFP4: TE draws from torch's generator, one stream per process
  std::uint32_t step_ = 0;
};

// ---- running one case ------------------------------------------------------------------------------

template <class Step>
void run_case(benchmark::State& state, std::uint32_t layers, bool kernels, bool stateful, bool snapshots) {
  Step s(layers, kernels);
  const auto t0 = std::chrono::steady_clock::now();
  s.step(nullptr);  // registration happens here
  const auto t1 = std::chrono::steady_clock::now();
  s.step(nullptr);
  probe p;
  s.step(&p);
  const std::uint64_t f0 = s.forward_updates(), b0 = s.backward_updates();
  for (auto _ : state) s.step(nullptr);
  const double iters = static_cast<double>(state.iterations());
  state.counters["snap_heap_B"] = static_cast<double>(p.heap_growth);
  state.counters["snap_payload_B"] = static_cast<double>(p.payload);
  state.counters["snapshots"] = static_cast<double>(p.snapshots);
  state.counters["fwd_upd"] = static_cast<double>(s.forward_updates() - f0) / iters;
  state.counters["bwd_upd"] = static_cast<double>(s.backward_updates() - b0) / iters;
  state.counters["first_step_us"] = std::chrono::duration<double, std::micro>(t1 - t0).count();
  state.counters["layers"] = layers;
  // Every stateful step runs exactly one update per direction; recompute holds one snapshot per layer.
  const std::uint64_t want = stateful ? static_cast<std::uint64_t>(state.iterations()) : 0;
  if (s.forward_updates() - f0 != want || s.backward_updates() - b0 != want)
    state.SkipWithError("update counts per step differ from one per direction (stateful) / zero (stateless)");
  else if (snapshots && p.snapshots != layers)
    state.SkipWithError("outstanding snapshots at the end of the forward differ from the number of layers");
}

/// `bench_policies --steps=N --case=NAME` runs N steady-state steps of one case and nothing else, for
/// instruction counts under callgrind (two runs of different N: the difference is per step).
struct step_runner {
  std::string name;
  int (*run)(std::uint32_t layers, bool kernels, long steps);
  std::uint32_t layers;
  bool kernels;
};
std::vector<step_runner>& step_runners() {
  static std::vector<step_runner> r;
  return r;
}
template <class Step>
int run_steps(std::uint32_t layers, bool kernels, long steps) {
  Step s(layers, kernels);
  s.step(nullptr);  // registration
  for (long i = 0; i < steps; ++i) s.step(nullptr);
  return 0;
}

double min_of(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

template <class Step>
void add(const std::string& name, std::uint32_t layers, bool kernels, bool stateful, bool snapshots) {
  benchmark::RegisterBenchmark(name.c_str(),
                               [=](benchmark::State& st) { run_case<Step>(st, layers, kernels, stateful, snapshots); })
      ->Unit(benchmark::kMicrosecond)
      ->ComputeStatistics("min", min_of);
  step_runners().push_back({name, &run_steps<Step>, layers, kernels});
}

template <class R, recompute C>
void add_recipe_checkpoint() {
  for (const std::uint32_t layers : {12u, 96u})
    for (const bool kernels : {true, false}) {
      const std::string tail = std::string("/") + recompute_name(C) + "/N" + std::to_string(layers) +
                               (kernels ? "/kernels" : "/no_kernels");
      const std::string head = recipe_name<R>();
      constexpr bool st = stateful<R>;
      // The manager's frames exist for every recipe; TE stashes and updates only delayed-scaling state.
      constexpr bool frames = C == recompute::stacked, stashes = frames && scale_state<R>;
      add<floor_step<R, C>>(head + "/floor" + tail, layers, kernels, st, false);
      add<te_step<R, C>>(head + "/te_style" + tail, layers, kernels, scale_state<R>, stashes);
      add<manager_step<R, engine_b, C>>(head + "/" + engine_b::name + tail, layers, kernels, st, frames);
      add<manager_step<R, autocast_b, C>>(head + "/" + autocast_b::name + tail, layers, kernels, st, frames);
      add<manager_step<R, scope_b, C>>(head + "/" + scope_b::name + tail, layers, kernels, st, frames);
    }
}

/// Policies written outside the library, through the same manager steps (no hand-written twins: the
/// point is that they plug in and what they cost next to the shipped rows above).
template <recompute C>
void add_user_policies() {
  using ema = custom::ema_current_scaling;
  for (const std::uint32_t layers : {12u, 96u})
    for (const bool kernels : {true, false}) {
      const std::string tail = std::string("/") + recompute_name(C) + "/N" + std::to_string(layers) +
                               (kernels ? "/kernels" : "/no_kernels");
      constexpr bool frames = C == recompute::stacked;
      add<manager_step<ema, engine_b, C>>(std::string("user_ema/") + engine_b::name + tail, layers, kernels, true, frames);
      add<manager_step<ema, every_k_b, C>>(std::string("user_ema/") + every_k_b::name + tail, layers, kernels, true,
                                           frames);
      add<manager_step<delayed_scaling<>, every_k_b, C>>(std::string("delayed/") + every_k_b::name + tail, layers,
                                                         kernels, true, frames);
    }
}

template <class R>
void add_recipe() {
  add_recipe_checkpoint<R, recompute::none>();
  add_recipe_checkpoint<R, recompute::stacked>();
}

}  // namespace

int main(int argc, char** argv) {
  add_recipe<delayed_scaling<>>();
  add_recipe<current_scaling>();
  add_recipe<mxfp8_scaling>();
  add_recipe<block_scaling>();
  add_recipe<nvfp4_scaling>();
  add_user_policies<recompute::none>();
  add_user_policies<recompute::stacked>();
  if (argc == 3 && std::string_view(argv[1]).starts_with("--steps=") && std::string_view(argv[2]).starts_with("--case=")) {
    const long steps = std::atol(argv[1] + 8);
    const std::string_view name = argv[2] + 7;
    for (const auto& c : step_runners())
      if (name == c.name) return c.run(c.layers, c.kernels, steps);
    std::fprintf(stderr, "bench_policies: no case '%.*s'\n", static_cast<int>(name.size()), name.data());
    return 2;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
