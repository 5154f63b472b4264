// SPDX-License-Identifier: Apache-2.0
// NVFP4 on cuda_backend byte for byte against host_backend (every case of backend/nvfp4_cases.hpp:
// fp32/bf16/fp16, 1x16 and 16x16 blocks, round to nearest and stochastic with the same (seed, offset),
// each direction, partial blocks, NaN/inf/+-0/outliers, the random Hadamard transform of the columnwise
// copy and its inverse), dequantize agreement, large inputs; and on the host, the kernels' block
// functions as nvcc compiles them, and the errors raised before any device work.
#include <doctest/doctest.h>

#include <cuda_fp4.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "backend/nvfp4_cases.hpp"
#include "cuda/device.cuh"
#include "tequant/backend/cuda/backend.cuh"
#include "tequant/backend/host.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/comm/single_process.hpp"
#include "tequant/manager.hpp"
#include "tequant/quantized_tensor.hpp"
#include "tequant/recipe/nvfp4.hpp"

using tequant::detail::check;

static_assert(tequant::stateful_recipe_for<tequant::nvfp4_scaling, tequant::cuda_backend>);
static_assert(tequant::detail::backend_has_nvfp4_rht<tequant::cuda_backend>);

namespace {

template <class Backend>
using nvfp4_manager = tequant::quantization_manager<tequant::nvfp4_scaling, tequant::explicit_scope,
                                                    tequant::stacked_recompute, tequant::single_process, Backend>;

/// A non-default stream for the duration of a test.
struct test_stream {
  cudaStream_t s = nullptr;
  test_stream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~test_stream() { (void)cudaStreamDestroy(s); }
};

template <class T>
std::vector<T> to_host(const tequant::cuda_backend& db, const T* p, std::size_t n) {
  std::vector<T> h(n);
  db.download(h.data(), p, n);
  return h;
}

/// One direction of a device cast decoded on the device, back on the host.
std::vector<float> device_dequantize(const tequant::cuda_backend& db, const nvfp4_cases::cast_case& c,
                                     const nvfp4_cases::cast_result& r, bool columnwise) {
  auto q = backend_suite::upload(db, columnwise ? r.col_data : r.row_data);
  auto s = backend_suite::upload(db, columnwise ? r.col_scale : r.row_scale);
  auto g = backend_suite::upload(db, columnwise ? r.col_global : r.row_global);
  auto out = db.make_buffer<float>(c.rows * c.cols);
  db.dequantize_nvfp4({q.data(), q.size()}, c.rows, c.cols, columnwise, {s.data(), s.size()}, {g.data(), g.size()},
                      {out.data(), out.size()}, c.rht);
  return to_host(db, out.data(), out.size());
}

template <class T>
void check_device_case(const tequant::cuda_backend& db, const nvfp4_cases::cast_case& c, const std::vector<T>& x) {
  const nvfp4_cases::cast_result want = nvfp4_cases::cast_on(tequant::host_backend{}, c, x);
  const nvfp4_cases::cast_result got = nvfp4_cases::cast_on(db, c, x);
  nvfp4_cases::check_same(want, got);
  for (const bool col : {false, true})
    if (col ? c.columnwise : c.rowwise) {
      const std::vector<float> h = nvfp4_cases::host_dequantize(c, want, col), d = device_dequantize(db, c, want, col);
      // The inverse transform's sums carry NaN: the device's is canonical, x86's the operand's.
      CHECK((c.rht && col ? nvfp4_cases::same_values(h, d) : nvfp4_cases::same_bits(h, d)));
    }
}

}  // namespace

namespace {

// E2M1 on the device against cuda_fp4.h's conversion (which the host test checks the host encoder
// against): mismatches and the smallest failing input of [begin, begin + count).
struct e2m1_sweep {
  unsigned long long mismatches;
  unsigned int first_bad;
};

__global__ void e2m1_sweep_kernel(std::uint64_t begin, std::uint64_t count, e2m1_sweep* r) {
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  for (std::uint64_t i = blockIdx.x * static_cast<std::uint64_t>(blockDim.x) + threadIdx.x; i < count; i += stride) {
    const auto u = static_cast<std::uint32_t>(begin + i);
    const float x = __uint_as_float(u);
    if (tequant::encode_e2m1(x) != __nv_cvt_float_to_fp4(x, __NV_E2M1, cudaRoundNearest)) {
      atomicAdd(&r->mismatches, 1ull);
      atomicMin(&r->first_bad, u);
    }
  }
}

// The NVFP4 formulas evaluated on the device for a list of inputs; the host recomputes them.
struct fp4_formulas {
  std::uint32_t word;         // Philox word of (seed = input bits, offset = index, element index % 4)
  std::uint8_t sr, rn, block_scale, scale_code;
  float s_enc, s_dec, mult;
  friend bool operator==(const fp4_formulas& a, const fp4_formulas& b) { return std::memcmp(&a, &b, sizeof a) == 0; }
};

TEQUANT_HD inline fp4_formulas fp4_formulas_of(std::uint32_t u, std::size_t i) {
  fp4_formulas f{};  // value-initialised: padding bytes are zero on both sides
  const float x = tequant::detail::bits_float(u);
  const float a = tequant::detail::abs_value(x);
  f.word = tequant::detail::philox_group(u, i, 0)[i % 4];
  f.rn = tequant::encode_e2m1(x);
  f.sr = tequant::encode_e2m1_stochastic(x, f.word);
  const tequant::detail::nvfp4_tensor_scales s = tequant::detail::nvfp4_scales_from_amax(a);
  f.s_enc = s.encode;
  f.s_dec = s.decode;
  f.block_scale = tequant::nvfp4_block_scale(a, 37.5f);
  f.scale_code = static_cast<std::uint8_t>(i % 127);
  f.mult = tequant::nvfp4_block_multiplier(f.scale_code, s.decode);
  return f;
}

__global__ void fp4_formulas_kernel(const std::uint32_t* in, std::size_t n, fp4_formulas* out) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = fp4_formulas_of(in[i], i);
}

}  // namespace

#define DEVICE_CASE_TEMPLATE(name, T, ...) TEST_CASE_TEMPLATE("device: " name * doctest::skip(cuda_test::no_device()), T, __VA_ARGS__)

TEST_CASE_TEMPLATE("nvcc host: the NVFP4 kernels' block functions equal host_backend byte for byte", T, float,
                   tequant::bf16, tequant::fp16) {
  nvfp4_cases::check_blocks_match_host<T>();
}

TEST_CASE("nvcc host: NVFP4 RHT argument errors on cuda_backend are host_backend's, raised before device work") {
  const tequant::cuda_backend db;  // no device needed: the checks come first
  const tequant::host_backend hb;
  std::vector<float> x(18 * 16, 1.0f), g(1), out(18 * 16);
  std::vector<std::uint8_t> data(18 * 8), scale(128 * 4);
  const tequant::nvfp4_output col{{}, {}, {}, data, scale, g};
  const tequant::nvfp4_options rht{false, nullptr, 0, true}, rht_2d{true, nullptr, 0, true};
  const tequant::matrix_view<const float> rows18{x.data(), 18, 16}, rows16{x.data(), 16, 16};
  const tequant::nvfp4_output col16{{}, {}, {}, std::span(data).first(128), scale, g};
  for (const char* want : {"rows must be a multiple of 16", "for 1D-scaled tensors"}) {
    const bool rows = want[0] == 'r';
    CHECK_THROWS_WITH_AS(db.quantize_nvfp4(rows ? rows18 : rows16, rows ? rht : rht_2d, rows ? col : col16),
                         doctest::Contains(want), tequant::error);
    CHECK_THROWS_WITH_AS(hb.quantize_nvfp4(rows ? rows18 : rows16, rows ? rht : rht_2d, rows ? col : col16),
                         doctest::Contains(want), tequant::error);
  }
  CHECK_THROWS_WITH_AS(db.dequantize_nvfp4(data, 18, 16, true, scale, g, out, true),
                       doctest::Contains("rows must be a multiple of 16"), tequant::error);
  CHECK_THROWS_WITH_AS(hb.dequantize_nvfp4(data, 18, 16, true, scale, g, out, true),
                       doctest::Contains("rows must be a multiple of 16"), tequant::error);
}

TEST_CASE("nvcc host: NVFP4 argument errors on cuda_backend are host_backend's, raised before device work") {
  tequant::cuda_backend db;  // no device needed: the checks come first
  const tequant::host_backend hb;
  std::vector<float> x(3 * 16, 1.0f);
  std::vector<std::uint8_t> data(24), scale(128 * 4);
  std::vector<float> g(1);
  const tequant::nvfp4_output odd{data, scale, g, {}, {}, {}};
  const tequant::nvfp4_options opt{};
  CHECK_THROWS_WITH_AS(db.quantize_nvfp4(tequant::matrix_view<const float>{x.data(), 3, 16}, opt, odd),
                       doctest::Contains("rows and cols must be even"), tequant::error);
  const tequant::nvfp4_output short_scale{std::span(data).first(16), std::span(scale).first(3), g, {}, {}, {}};
  CHECK_THROWS_WITH_AS(db.quantize_nvfp4(tequant::matrix_view<const float>{x.data(), 2, 16}, opt, short_scale),
                       doctest::Contains("rowwise_scale has 3 elements"), tequant::error);
  CHECK_THROWS_WITH_AS(hb.quantize_nvfp4(tequant::matrix_view<const float>{x.data(), 2, 16}, opt, short_scale),
                       doctest::Contains("rowwise_scale has 3 elements"), tequant::error);
  std::vector<float> out(32);
  CHECK_THROWS_WITH_AS(db.dequantize_nvfp4(std::span(data).first(16), 2, 16, false, std::span(scale).first(5), g, out),
                       doctest::Contains("dequantize_nvfp4: scale has 5 elements"), tequant::error);
  // An empty tensor writes nothing and draws nothing, as on the host.
  std::uint64_t offset = 9;
  db.quantize_nvfp4(tequant::matrix_view<const float>{nullptr, 0, 16}, tequant::nvfp4_options{false, &offset, 1},
                    tequant::nvfp4_output{});
  CHECK(offset == 9);
}

DEVICE_CASE_TEMPLATE("NVFP4 casts and dequantize on cuda_backend equal host_backend byte for byte", T, float,
                     tequant::bf16, tequant::fp16) {
  test_stream s;
  const tequant::cuda_backend db{s.s};
  for (const nvfp4_cases::cast_case& c : nvfp4_cases::all_cases()) {
    CAPTURE(c.name());
    check_device_case(db, c, nvfp4_cases::inputs_as<T>(nvfp4_cases::input_of(c)));
  }
}

// Many thread blocks per kernel (and more than one grid-stride pass for none: grids are capped far
// above these), partial blocks on both edges, both directions, every rounding and block shape.
DEVICE_CASE_TEMPLATE("large NVFP4 casts on cuda_backend equal host_backend byte for byte", T, float, tequant::bf16,
                     tequant::fp16) {
  test_stream s;
  const tequant::cuda_backend db{s.s};
  unsigned seed = 1000;
  for (const bool tile_2d : {false, true})
    for (const bool sr : {false, true}) {
      const nvfp4_cases::cast_case c{1000, 1030, seed++, true, 0, tile_2d, sr, true, true, sr ? (std::uint64_t{1} << 40) + 3 : 0, false};
      CAPTURE(c.name());
      check_device_case(db, c, nvfp4_cases::inputs_as<T>(nvfp4_cases::input_of(c)));
    }
  for (const bool sr : {false, true}) {  // the random Hadamard transform: 63 groups a column
    const nvfp4_cases::cast_case c{1008, 1030, seed++, true, 0, false, sr, true, true, sr ? (std::uint64_t{1} << 40) + 3 : 0, true};
    CAPTURE(c.name());
    check_device_case(db, c, nvfp4_cases::inputs_as<T>(nvfp4_cases::input_of(c)));
  }
}

// Two stochastic casts in a row through plans, as a training step does: the second continues the
// stream where the first left it, on both backends.
DEVICE_CASE_TEMPLATE("consecutive stochastic NVFP4 casts on cuda_backend draw the host's bits", T, float, tequant::bf16) {
  test_stream s;
  const tequant::cuda_backend db{s.s};
  const tequant::host_backend hb;
  const std::size_t M = 64, K = 96;
  const std::vector<T> x = nvfp4_cases::inputs_as<T>(nvfp4_cases::values(M * K, 5, false));
  std::uint64_t host_offset = 12, dev_offset = 12;
  tequant::cast_plan hp{nullptr, nullptr, tequant::fp8_dtype::e4m3, tequant::scaling_mode::nvfp4};
  hp.rng_seed = 77;
  tequant::cast_plan dp = hp;
  hp.rng_offset = &host_offset;
  dp.rng_offset = &dev_offset;
  tequant::quantized_tensor<tequant::host_backend> hq;
  tequant::quantized_tensor<tequant::cuda_backend> dq;
  hq.prepare(hb, hp, M, K);
  dq.prepare(db, dp, M, K);
  auto xd = backend_suite::upload(db, x);
  for (int step = 0; step < 3; ++step) {
    CAPTURE(step);
    hb.quantize(tequant::matrix_view<const T>{x.data(), M, K}, hp, hq.output());
    db.quantize(tequant::matrix_view<const T>{xd.data(), M, K}, dp, dq.output());
    CHECK(dev_offset == host_offset);
    const auto h = hq.output(), d = dq.output();
    CHECK(to_host(db, d.rowwise_data.data(), d.rowwise_data.size()) ==
          std::vector<std::uint8_t>(h.rowwise_data.begin(), h.rowwise_data.end()));
    CHECK(to_host(db, d.columnwise_data.data(), d.columnwise_data.size()) ==
          std::vector<std::uint8_t>(h.columnwise_data.begin(), h.columnwise_data.end()));
  }
}

// nvfp4_scaling's state is host memory whatever the backend: a manager on cuda_backend plans without a
// device, with the host manager's plans.
TEST_CASE("nvcc host: an NVFP4 manager on cuda_backend plans as on host_backend without touching the device") {
  nvfp4_manager<tequant::cuda_backend> dm({}, {}, {}, tequant::cuda_backend{});
  nvfp4_manager<tequant::host_backend> hm({}, {}, {}, tequant::host_backend{});
  const auto d = dm.register_module("lin"), h = hm.register_module("lin");
  {
    auto ac = dm.autocast();
    CHECK(dm.plan_cast(dm.slot(d, tequant::forward_role::weight)).tile_2d);
    CHECK(dm.plan_cast(dm.slot(d, tequant::forward_role::input)).rng_offset == nullptr);
  }
  auto scope = dm.backward_scope();
  auto hscope = hm.backward_scope();
  const auto dp = dm.plan_cast(dm.slot(d, tequant::backward_role::grad_output));
  const auto hp = hm.plan_cast(hm.slot(h, tequant::backward_role::grad_output));
  REQUIRE(dp.rng_offset != nullptr);
  CHECK(*dp.rng_offset == *hp.rng_offset);
  CHECK(dp.rng_seed == hp.rng_seed);
  CHECK(dp.mode == tequant::scaling_mode::nvfp4);
}

// Training steps through two managers, one per backend: forward input and 2D weight casts, stochastic
// gradient casts, with and without the random Hadamard transform of the columnwise copies; every cast's
// bytes and every stream position agree.
DEVICE_CASE_TEMPLATE("NVFP4 training steps through the manager on cuda_backend equal host_backend", T, float,
                     tequant::bf16) {
  test_stream s;
  const tequant::cuda_backend db{s.s};
  const tequant::host_backend hb;
  for (const bool rht : {true, false}) {  // TE's default (and the recipe's) first
    CAPTURE(rht);
    tequant::nvfp4_params p;
    p.random_hadamard_transform = rht;  // on: the columnwise copies of inputs and gradients transformed
    nvfp4_manager<tequant::cuda_backend> dm(p, {}, {}, db);
    nvfp4_manager<tequant::host_backend> hm(p, {}, {}, hb);
    const auto d = dm.register_module("lin"), h = hm.register_module("lin");
    const std::size_t M = 48, K = 80;
    tequant::quantized_tensor<tequant::cuda_backend> dq;
    tequant::quantized_tensor<tequant::host_backend> hq;
    const auto cast_both = [&](const std::vector<T>& x, const tequant::cast_plan& dp, const tequant::cast_plan& hp) {
      auto xd = backend_suite::upload(db, x);
      dq.prepare(db, dp, M, K);
      hq.prepare(hb, hp, M, K);
      db.quantize(tequant::matrix_view<const T>{xd.data(), M, K}, dp, dq.output());
      hb.quantize(tequant::matrix_view<const T>{x.data(), M, K}, hp, hq.output());
      const auto o = dq.output(), want = hq.output();
      CHECK(to_host(db, o.rowwise_data.data(), o.rowwise_data.size()) ==
            std::vector<std::uint8_t>(want.rowwise_data.begin(), want.rowwise_data.end()));
      CHECK(to_host(db, o.columnwise_data.data(), o.columnwise_data.size()) ==
            std::vector<std::uint8_t>(want.columnwise_data.begin(), want.columnwise_data.end()));
      CHECK(to_host(db, o.rowwise_block_scale.data(), o.rowwise_block_scale.size()) ==
            std::vector<std::uint8_t>(want.rowwise_block_scale.begin(), want.rowwise_block_scale.end()));
      CHECK(to_host(db, o.columnwise_block_scale.data(), o.columnwise_block_scale.size()) ==
            std::vector<std::uint8_t>(want.columnwise_block_scale.begin(), want.columnwise_block_scale.end()));
    };
    unsigned seed = 300;
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      {
        auto ac = dm.autocast();
        auto hac = hm.autocast();
        for (const auto role : {tequant::forward_role::input, tequant::forward_role::weight})
          cast_both(nvfp4_cases::inputs_as<T>(nvfp4_cases::values(M * K, seed++, false)), dm.plan_cast(dm.slot(d, role)),
                    hm.plan_cast(hm.slot(h, role)));
        CHECK(dm.plan_cast(dm.slot(d, tequant::forward_role::input)).columnwise_rht == rht);
      }
      {
        auto scope = dm.backward_scope();
        auto hscope = hm.backward_scope();
        for (const auto role : {tequant::backward_role::grad_output, tequant::backward_role::grad_input}) {
          const auto dp = dm.plan_cast(dm.slot(d, role));
          const auto hp = hm.plan_cast(hm.slot(h, role));
          REQUIRE(dp.rng_offset != nullptr);
          cast_both(nvfp4_cases::inputs_as<T>(nvfp4_cases::values(M * K, seed++, true)), dp, hp);
          CHECK(*dp.rng_offset == *hp.rng_offset);
        }
      }
    }
  }
}

TEST_CASE("device: E2M1 encodes like cuda_fp4.h's conversion on all 2^32 inputs" * doctest::skip(cuda_test::no_device())) {
  e2m1_sweep* r = nullptr;
  check(cudaMalloc(&r, sizeof(e2m1_sweep)), "cudaMalloc(e2m1_sweep)");
  const e2m1_sweep init{0, ~0u};
  check(cudaMemcpy(r, &init, sizeof init, cudaMemcpyHostToDevice), "cudaMemcpy(init)");
  const std::uint64_t chunk = 1ull << 30;
  for (std::uint64_t begin = 0; begin < (1ull << 32); begin += chunk) {
    e2m1_sweep_kernel<<<4096, 256>>>(begin, chunk, r);
    check(cudaGetLastError(), "e2m1_sweep_kernel launch");
  }
  e2m1_sweep got{};
  check(cudaMemcpy(&got, r, sizeof got, cudaMemcpyDeviceToHost), "cudaMemcpy(result)");
  check(cudaFree(r), "cudaFree");
  CAPTURE(got.first_bad);
  CHECK(got.mismatches == 0);
}

// Stochastic E2M1, the global and block scales and the multiplier: the device's results equal the
// host's for 2^24 inputs spread over every exponent (and every sign, NaN and infinity among them).
TEST_CASE("device: the NVFP4 formulas and Philox give the host's bits" * doctest::skip(cuda_test::no_device())) {
  const std::size_t n = std::size_t{1} << 24;
  std::vector<std::uint32_t> in(n);
  std::mt19937 rng(11);
  for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::uint32_t>(i << 8) | (rng() & 0xFFu);
  const tequant::cuda_backend db;
  auto din = backend_suite::upload(db, in);
  auto dout = db.make_buffer<fp4_formulas>(n);
  fp4_formulas_kernel<<<4096, 256>>>(din.data(), n, dout.data());
  check(cudaGetLastError(), "fp4_formulas_kernel launch");
  const std::vector<fp4_formulas> got = to_host(db, dout.data(), n);
  std::size_t bad = 0, first = n;
  for (std::size_t i = 0; i < n; ++i)
    if (!(got[i] == fp4_formulas_of(in[i], i))) {
      ++bad;
      first = first < i ? first : i;
    }
  CAPTURE(first);
  CHECK(bad == 0);
}

// The cast enqueues without a host synchronisation, so it can be captured into a CUDA graph; a replay
// on new input gives the host's bytes for that input (with the random Hadamard transform too). The
// stochastic stream position is read when the cast is enqueued (host memory), so a captured stochastic
// cast draws the same bits at every replay.
DEVICE_CASE_TEMPLATE("an NVFP4 cast captured in a CUDA graph replays with the host's bytes", T, float, tequant::bf16) {
  test_stream s;
  const tequant::cuda_backend db{s.s};
  const tequant::host_backend hb;
  const std::size_t M = 64, K = 160;
  for (const int mode : {0, 1, 2}) {  // 2D tiles; stochastic; the random Hadamard transform (a memset too)
    const bool sr = mode == 1;
    CAPTURE(mode);
    std::uint64_t dev_offset = 8;
    tequant::cast_plan plan{nullptr, nullptr, tequant::fp8_dtype::e4m3, tequant::scaling_mode::nvfp4};
    plan.tile_2d = mode == 0;
    plan.columnwise_rht = mode == 2;
    plan.rng_seed = 3;
    plan.rng_offset = sr ? &dev_offset : nullptr;
    tequant::quantized_tensor<tequant::cuda_backend> dq;
    dq.prepare(db, plan, M, K);
    auto xd = db.make_buffer<T>(M * K);
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    check(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
    db.quantize(tequant::matrix_view<const T>{xd.data(), M, K}, plan, dq.output());
    check(cudaStreamEndCapture(s.s, &graph), "cudaStreamEndCapture");
    check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
    CHECK(dev_offset == (sr ? 8 + 2 * (M * K / 4) : 8));  // advanced once, at capture
    for (int replay = 0; replay < 3; ++replay) {
      CAPTURE(replay);
      const std::vector<T> x = nvfp4_cases::inputs_as<T>(nvfp4_cases::values(M * K, 40 + replay, true));
      db.upload(xd.data(), x.data(), x.size());
      check(cudaGraphLaunch(exec, s.s), "cudaGraphLaunch");
      check(cudaStreamSynchronize(s.s), "cudaStreamSynchronize");
      std::uint64_t host_offset = 8;  // every replay draws from the captured position
      tequant::cast_plan hp = plan;
      hp.rng_offset = sr ? &host_offset : nullptr;
      tequant::quantized_tensor<tequant::host_backend> hq;
      hq.prepare(hb, hp, M, K);
      hb.quantize(tequant::matrix_view<const T>{x.data(), M, K}, hp, hq.output());
      const auto d = dq.output(), h = hq.output();
      CHECK(to_host(db, d.rowwise_data.data(), d.rowwise_data.size()) ==
            std::vector<std::uint8_t>(h.rowwise_data.begin(), h.rowwise_data.end()));
      CHECK(to_host(db, d.columnwise_data.data(), d.columnwise_data.size()) ==
            std::vector<std::uint8_t>(h.columnwise_data.begin(), h.columnwise_data.end()));
      CHECK(to_host(db, d.columnwise_block_scale.data(), d.columnwise_block_scale.size()) ==
            std::vector<std::uint8_t>(h.columnwise_block_scale.begin(), h.columnwise_block_scale.end()));
      CHECK(nvfp4_cases::same_bits(to_host(db, d.rowwise_scale_inv.data(), 1), {h.rowwise_scale_inv[0]}));
      CHECK(nvfp4_cases::same_bits(to_host(db, d.columnwise_scale_inv.data(), 1), {h.columnwise_scale_inv[0]}));
    }
    check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
    check(cudaGraphDestroy(graph), "cudaGraphDestroy");
  }
}
