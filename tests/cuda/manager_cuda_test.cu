// SPDX-License-Identifier: Apache-2.0
// The quantization manager on cuda_backend: a training step (casts through plan_cast, a checkpoint
// frame and its replay, requests in a backward scope, both updates) gives byte-identical outputs,
// scales and histories to the same step on host_backend; the step captured in a CUDA graph and
// replayed N times equals N eager steps.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "cuda/device.cuh"
#include "tequant/backend/cuda/backend.cuh"
#include "tequant/backend/host.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/comm/single_process.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/block.hpp"
#include "tequant/recipe/current.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/mxfp8.hpp"

using tequant::detail::check;

// The manager updates every bucket of a direction in one launch on cuda_backend, one bucket at a
// time on host_backend (unchanged).
static_assert(tequant::detail::batched_delayed_update<tequant::delayed_bucket<tequant::cuda_backend>, tequant::window_max>);
static_assert(!tequant::detail::batched_delayed_update<tequant::delayed_bucket<tequant::host_backend>, tequant::window_max>);

namespace {

using tequant::backward_role;
using tequant::forward_role;

template <class Backend, class Recipe = tequant::delayed_scaling<>>
using manager_on = tequant::quantization_manager<Recipe, tequant::explicit_scope, tequant::stacked_recompute,
                                                 tequant::single_process, Backend>;

struct test_stream {
  cudaStream_t s = nullptr;
  test_stream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~test_stream() { (void)cudaStreamDestroy(s); }
};

// Casts of one step, in order. Each reads its own input tensor (replays re-read the original ones).
enum cast_id : int {
  a_in, a_w, b_in, b_w, c_in0, c_w0, c_in1, c_w1, c_in2, c_w2,        // forward (b and c in the frame)
  rb_in, rb_w, rc_in0, rc_w0, rc_in1, rc_w1, rc_in2, rc_w2,            // replay of the frame
  c_go0, c_go1, c_go2, b_go, b_gi, a_go,                               // backward
  cast_count
};
constexpr int input_count = cast_count - (rc_w2 - rb_in + 1);
// Input tensor of each cast (replay casts share their forward cast's input).
constexpr int input_of(int c) { return c < rb_in ? c : c <= rc_w2 ? c - rb_in + b_in : c - (rc_w2 - rb_in + 1); }
std::size_t input_size(int i) { return 257 + 611 * static_cast<std::size_t>(i); }

struct step_result {
  std::vector<std::vector<std::uint8_t>> out;
  std::vector<float> scale_inv, scales, history;
};

/// One model (modules a, b, c; c is registered lazily inside the checkpoint frame during the first
/// step, so the frame's snapshot grows there) and its tensors, on any backend.
template <class Backend>
struct rig {
  using manager = manager_on<Backend>;
  template <class T>
  using buf = decltype(std::declval<Backend&>().template make_buffer<T>(std::size_t{}));

  Backend be;
  manager m;
  tequant::module_handle a, b, c;
  // b's casts go through cast handles (bound before c registers, so they re-bind once), the rest
  // through slot ids: both paths on both backends.
  tequant::forward_cast_handle hb_in, hb_w;
  tequant::backward_cast_handle hb_go;
  bool c_registered = false;
  tequant::checkpoint_frame frame{"block b+c"};
  std::vector<buf<float>> in;
  std::vector<buf<std::uint8_t>> out;
  buf<float> inv;
  int steps_where_update_moved_a_snapshotted_scale = 0;

  explicit rig(Backend backend) : be(backend), m(tequant::delayed_params{tequant::fp8_format::hybrid, 4, 0, true}, {}, {}, backend) {
    a = m.register_module("a");
    b = m.register_module("b");
    hb_in = m.bind(b, forward_role::input);
    hb_w = m.bind(b, forward_role::weight);
    hb_go = m.bind(b, backward_role::grad_output);
    for (int i = 0; i < input_count; ++i) in.push_back(be.template make_buffer<float>(input_size(i)));
    for (int k = 0; k < cast_count; ++k) out.push_back(be.template make_buffer<std::uint8_t>(input_size(input_of(k))));
    inv = be.template make_buffer<float>(cast_count);
  }

  void set_inputs(const std::vector<std::vector<float>>& x) {
    for (int i = 0; i < input_count; ++i) be.upload(in[i].data(), x[i].data(), x[i].size());
  }

  void cast(int k, tequant::slot_id s) { cast_with(k, m.plan_cast(s)); }
  template <tequant::direction D>
  void cast(int k, tequant::cast_handle<D>& h) {
    cast_with(k, m.plan_cast(h));
  }
  void cast_with(int k, const tequant::cast_plan& p) {
    const int i = input_of(k);
    be.quantize_tensor(in[i].data(), input_size(i), p.scale, p.dtype, out[k].data(), inv.data() + k, p.amax);
  }

  // host_backend only (a read on the device would synchronise, which a graph capture forbids).
  float host_scale(tequant::slot_id s) const {
    if constexpr (Backend::host_accessible) return m.scale(s);
    return 0.0f;
  }

  void step() {
    float before = 0.0f;
    {
      auto ac = m.autocast();
      (void)m.module_forward(a);
      cast(a_in, m.slot(a, forward_role::input));
      cast(a_w, m.slot(a, forward_role::weight));
      {
        auto g = m.checkpoint_forward(frame);
        (void)m.module_forward(b);
        cast(b_in, hb_in);
        cast(b_w, hb_w);
        if (!c_registered) {  // the first forward registers c, after the frame's first snapshot
          c = m.register_module("c", 3);
          c_registered = true;
        }
        (void)m.module_forward(c);
        for (std::uint32_t g3 = 0; g3 < 3; ++g3) {
          cast(c_in0 + 2 * static_cast<int>(g3), m.slot(c, forward_role::input, g3));
          cast(c_w0 + 2 * static_cast<int>(g3), m.slot(c, forward_role::weight, g3));
        }
      }
      before = host_scale(m.slot(b, forward_role::input));
    }  // forward update
    if (host_scale(m.slot(b, forward_role::input)) != before) ++steps_where_update_moved_a_snapshotted_scale;
    {
      auto scope = m.backward_scope();
      {
        auto r = m.checkpoint_replay(frame);
        cast(rb_in, hb_in);
        cast(rb_w, hb_w);
        for (std::uint32_t g3 = 0; g3 < 3; ++g3) {
          cast(rc_in0 + 2 * static_cast<int>(g3), m.slot(c, forward_role::input, g3));
          cast(rc_w0 + 2 * static_cast<int>(g3), m.slot(c, forward_role::weight, g3));
        }
      }
      for (std::uint32_t g3 = 0; g3 < 3; ++g3) cast(c_go0 + static_cast<int>(g3), m.slot(c, backward_role::grad_output, g3));
      m.request_backward_update();
      cast(b_go, hb_go);
      cast(b_gi, m.slot(b, backward_role::grad_input));
      m.request_backward_update();
      cast(a_go, m.slot(a, backward_role::grad_output));
      m.request_backward_update();
    }  // backward flush
  }

  step_result result() {
    step_result r;
    for (int k = 0; k < cast_count; ++k) {
      r.out.emplace_back(input_size(input_of(k)));
      be.download(r.out.back().data(), out[k].data(), r.out.back().size());
    }
    r.scale_inv.resize(cast_count);
    be.download(r.scale_inv.data(), inv.data(), cast_count);
    for (auto& st : m.recipe_state()) {
      std::vector<float> s(st.size()), h(static_cast<std::size_t>(st.size()) * st.history_length());
      be.download(s.data(), st.scale_data(), s.size());
      st.export_te_history(0, st.size(), h);
      r.scales.insert(r.scales.end(), s.begin(), s.end());
      r.history.insert(r.history.end(), h.begin(), h.end());
    }
    return r;
  }
};

bool same_bytes(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
}

void check_same(const step_result& x, const step_result& y) {
  REQUIRE(x.out.size() == y.out.size());
  for (std::size_t k = 0; k < x.out.size(); ++k) {
    CAPTURE(k);
    CHECK(x.out[k] == y.out[k]);
  }
  CHECK(same_bytes(x.scale_inv, y.scale_inv));
  CHECK(same_bytes(x.scales, y.scales));
  CHECK(same_bytes(x.history, y.history));
}

// A replay casts with the scales of its original forward, whatever the forward update did since.
void check_replay_reproduces_forward(const step_result& r) {
  for (int k = rb_in; k <= rc_w2; ++k) {
    CAPTURE(k);
    CHECK(r.out[k] == r.out[k - rb_in + b_in]);
    CHECK(std::memcmp(&r.scale_inv[k], &r.scale_inv[k - rb_in + b_in], sizeof(float)) == 0);
  }
}

// Inputs whose magnitude changes from step to step, so that scales move; a few zeros and one tensor
// all zero now and then (slots the update leaves untouched).
std::vector<std::vector<float>> random_inputs(std::mt19937& rng) {
  std::vector<std::vector<float>> x(input_count);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int i = 0; i < input_count; ++i) {
    const float mag = std::exp2(static_cast<float>(static_cast<int>(rng() % 17) - 8));
    const bool zero = rng() % 11 == 0;
    x[i].resize(input_size(i));
    for (auto& v : x[i]) v = zero || rng() % 50 == 0 ? 0.0f : u(rng) * mag;
  }
  return x;
}

}  // namespace

#define DEVICE_CASE(name) TEST_CASE("device: " name * doctest::skip(cuda_test::no_device()))

DEVICE_CASE("manager training steps on cuda_backend are byte-identical to host_backend") {
  test_stream s;
  rig<tequant::host_backend> host{tequant::host_backend{}};
  rig<tequant::cuda_backend> dev{tequant::cuda_backend{s.s}};
  std::mt19937 rng(11);
  for (int step = 0; step < 12; ++step) {
    CAPTURE(step);
    const auto x = random_inputs(rng);
    host.set_inputs(x);
    dev.set_inputs(x);
    host.step();
    dev.step();
    const step_result hr = host.result(), dr = dev.result();
    check_same(hr, dr);
    check_replay_reproduces_forward(dr);
    CHECK(dev.frame.snapshot_slots() == 0);  // released by the replay
    const auto hs = host.m.stats(), ds = dev.m.stats();
    CHECK(ds.forward_updates == static_cast<std::uint64_t>(step + 1));
    CHECK(ds.backward_updates == static_cast<std::uint64_t>(step + 1));
    CHECK(ds.forward_updates == hs.forward_updates);
    CHECK(ds.backward_updates == hs.backward_updates);
    CHECK(ds.outstanding_snapshots == 0);
    CHECK_FALSE(ds.pending);
  }
  // The snapshots mattered: the forward update moved a scale that the replay then did not use.
  CHECK(host.steps_where_update_moved_a_snapshotted_scale > 0);
  // manager::scale reads the device (a synchronisation) and agrees with the host manager.
  CHECK(dev.m.scale(dev.m.slot(dev.c, forward_role::weight, 2)) == host.m.scale(host.m.slot(host.c, forward_role::weight, 2)));
}

DEVICE_CASE("a training step through the manager captured in a CUDA graph and replayed N times equals N eager steps") {
  test_stream gs, es;
  rig<tequant::cuda_backend> graphed{tequant::cuda_backend{gs.s}};
  rig<tequant::cuda_backend> eager{tequant::cuda_backend{es.s}};
  rig<tequant::host_backend> host{tequant::host_backend{}};
  std::mt19937 rng(5);

  // Warm-up step, eagerly everywhere: registration and the frame's snapshot storage allocate here.
  const auto x0 = random_inputs(rng);
  for (auto* r : {&graphed, &eager}) r->set_inputs(x0);
  host.set_inputs(x0);
  graphed.step();
  eager.step();
  host.step();

  // Global capture mode: a synchronising call anywhere in the step (a download, a read, a
  // cudaMalloc or cudaFree) would fail the capture.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(gs.s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  try {
    graphed.step();
  } catch (...) {
    (void)cudaStreamEndCapture(gs.s, &graph);
    throw;
  }
  check(cudaStreamEndCapture(gs.s, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  std::size_t nodes = 0;
  check(cudaGraphGetNodes(graph, nullptr, &nodes), "cudaGraphGetNodes");
  CHECK(nodes >= cast_count + 2);  // every cast, the snapshot copies, both updates

  constexpr int N = 10;
  for (int step = 1; step <= N; ++step) {
    CAPTURE(step);
    const auto x = random_inputs(rng);
    graphed.set_inputs(x);
    eager.set_inputs(x);
    host.set_inputs(x);
    check(cudaGraphLaunch(exec, gs.s), "cudaGraphLaunch");
    check(cudaStreamSynchronize(gs.s), "cudaStreamSynchronize");
    eager.step();
    host.step();
    const step_result gr = graphed.result(), er = eager.result();
    check_same(gr, er);
    check_same(gr, host.result());
    check_replay_reproduces_forward(gr);
  }
  // Counters are host-side: the graph's replays are not counted (warm-up + the captured run only).
  CHECK(graphed.m.stats().forward_updates == 2);
  CHECK(graphed.m.stats().backward_updates == 2);
  CHECK(eager.m.stats().forward_updates == N + 1);
  CHECK(eager.m.stats().backward_updates == N + 1);
  CHECK(graphed.m.stats().outstanding_snapshots == 0);
  check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  check(cudaGraphDestroy(graph), "cudaGraphDestroy");
}

DEVICE_CASE("stateless recipes through the manager on cuda_backend match host_backend") {
  test_stream s;
  tequant::cuda_backend db{s.s};
  tequant::host_backend hb;
  const tequant::current_params params{tequant::fp8_format::hybrid, true, 1e-6f};
  manager_on<tequant::cuda_backend, tequant::current_scaling> dm(params, {}, {}, db);
  manager_on<tequant::host_backend, tequant::current_scaling> hm(params, {}, {}, hb);
  const auto dh = dm.register_module("lin"), hh = hm.register_module("lin");
  std::mt19937 rng(9);
  const std::size_t n = 5000;
  std::vector<float> x(n);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (auto& v : x) v = u(rng);
  auto dx = db.make_buffer<float>(n);
  auto dq = db.make_buffer<std::uint8_t>(n);
  auto dinv = db.make_buffer<float>(2);
  db.upload(dx.data(), x.data(), n);
  std::vector<std::uint8_t> hq(n);
  float hinv[2] = {0, 0};
  tequant::checkpoint_frame fr("stateless");
  {
    auto ac = dm.autocast();
    auto ac2 = hm.autocast();
    auto g = dm.checkpoint_forward(fr);
    for (const auto role : {backward_role::grad_output, backward_role::grad_input}) {
      const auto dp = dm.plan_cast(dm.slot(dh, role)), hp = hm.plan_cast(hm.slot(hh, role));
      CHECK(dp.scale == nullptr);
      CHECK(dp.amax == nullptr);
      CHECK(dp.dtype == hp.dtype);
      db.quantize_current(dx.data(), n, dp.dtype, params.power_2_scale, params.amax_epsilon, dq.data(), dinv.data(),
                          dinv.data() + 1);
      hb.quantize_current(x.data(), n, hp.dtype, params.power_2_scale, params.amax_epsilon, hq.data(), &hinv[0], &hinv[1]);
      std::vector<std::uint8_t> got(n);
      db.download(got.data(), dq.data(), n);
      CHECK(got == hq);
      float ginv[2];
      db.download(ginv, dinv.data(), 2);
      CHECK(std::memcmp(ginv, hinv, sizeof ginv) == 0);
    }
    const auto fp = dm.plan_cast(dm.slot(dh, forward_role::input));
    CHECK(fp.scale == nullptr);
  }
  {
    auto scope = dm.backward_scope();
    auto r = dm.checkpoint_replay(fr);
    dm.request_backward_update();
  }
  CHECK(dm.stats().forward_updates == 0);
  CHECK(dm.stats().backward_updates == 0);
}

// Runs everywhere: constructing a manager on cuda_backend needs no device, stateless recipes never
// touch device memory, and a delayed manager's failed device allocation leaves it consistent.
TEST_CASE("nvcc host: managers on cuda_backend construct and plan without touching the device") {
  tequant::cuda_backend b;
  manager_on<tequant::cuda_backend, tequant::current_scaling> cur({}, {}, {}, b);
  manager_on<tequant::cuda_backend, tequant::mxfp8_scaling> mx({}, {}, {}, b);
  manager_on<tequant::cuda_backend, tequant::block_scaling> blk({}, {}, {}, b);
  const auto h1 = cur.register_module("m", 2);
  const auto h2 = mx.register_module("m");
  const auto h3 = blk.register_module("m");
  CHECK(cur.plan_cast(cur.slot(h1, forward_role::weight, 1)).scale == nullptr);
  CHECK(mx.plan_cast(mx.slot(h2, backward_role::grad_output)).dtype == tequant::fp8_dtype::e4m3);
  CHECK(blk.plan_cast(blk.slot(h3, forward_role::input)).amax == nullptr);
  { auto scope = cur.backward_scope(); }
  CHECK(cur.stats().backward_updates == 0);

  manager_on<tequant::cuda_backend> delayed({}, {}, {}, b);
  if (cuda_test::no_device()) {
    CHECK_THROWS_WITH_AS(delayed.register_module("dense"), doctest::Contains("tequant: CUDA error in cudaMalloc"),
                         tequant::error);
    CHECK(delayed.module_count() == 0);
    { auto ac = delayed.autocast(); }  // an update over empty buckets launches nothing
    CHECK(delayed.stats().forward_updates == 1);
  } else {
    const auto h = delayed.register_module("dense");
    CHECK(delayed.scale(delayed.slot(h, forward_role::input)) == 1.0f);
  }
}
