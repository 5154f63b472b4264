// SPDX-License-Identifier: Apache-2.0
// NVFP4 on cuda_backend byte for byte against host_backend (every case of backend/nvfp4_cases.hpp:
// fp32/bf16/fp16, 1x16 and 16x16 blocks, round to nearest and stochastic with the same (seed, offset),
// each direction, partial blocks, NaN/inf/+-0/outliers), dequantize agreement, large inputs; and on the
// host, the kernels' block functions as nvcc compiles them, and the errors raised before any device work.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "backend/nvfp4_cases.hpp"
#include "cuda/device.cuh"
#include "tequant/backend/cuda/backend.cuh"
#include "tequant/backend/host.hpp"
#include "tequant/quantized_tensor.hpp"

using tequant::detail::check;

namespace {

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
                      {out.data(), out.size()});
  return to_host(db, out.data(), out.size());
}

template <class T>
void check_device_case(const tequant::cuda_backend& db, const nvfp4_cases::cast_case& c, const std::vector<T>& x) {
  const nvfp4_cases::cast_result want = nvfp4_cases::cast_on(tequant::host_backend{}, c, x);
  const nvfp4_cases::cast_result got = nvfp4_cases::cast_on(db, c, x);
  nvfp4_cases::check_same(want, got);
  for (const bool col : {false, true})
    if (col ? c.columnwise : c.rowwise)
      CHECK(nvfp4_cases::same_bits(nvfp4_cases::host_dequantize(c, want, col), device_dequantize(db, c, want, col)));
}

}  // namespace

#define DEVICE_CASE_TEMPLATE(name, T, ...) TEST_CASE_TEMPLATE("device: " name * doctest::skip(cuda_test::no_device()), T, __VA_ARGS__)

TEST_CASE_TEMPLATE("nvcc host: the NVFP4 kernels' block functions equal host_backend byte for byte", T, float,
                   tequant::bf16, tequant::fp16) {
  nvfp4_cases::check_blocks_match_host<T>();
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
      const nvfp4_cases::cast_case c{1000, 1030, seed++, true, 0, tile_2d, sr, true, true, sr ? (std::uint64_t{1} << 40) + 3 : 0};
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
