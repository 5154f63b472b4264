// SPDX-License-Identifier: Apache-2.0
// cuda_backend against the scalar references (the backend-generic suite) and byte for byte against
// host_backend; the one-launch delayed update against the host loop; a captured and replayed CUDA
// graph of a training step (casts recording amaxes, the no-op all-reduce, the update).
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <vector>

#include "backend/backend_suite.hpp"
#include "cuda/device.cuh"
#include "tequant/backend/cuda/backend.cuh"
#include "tequant/backend/host.hpp"
#include "tequant/comm/single_process.hpp"
#include "tequant/recipe/delayed.hpp"

using tequant::detail::check;

namespace {

/// A non-default stream for the duration of a test.
struct test_stream {
  cudaStream_t s = nullptr;
  test_stream() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~test_stream() { (void)cudaStreamDestroy(s); }
};

template <class T>
std::vector<T> bytes_of(const tequant::cuda_backend& b, const T* p, std::size_t n) {
  std::vector<T> h(n);
  b.download(h.data(), p, n);
  return h;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace

#define DEVICE_CASE(name) TEST_CASE("device: " name * doctest::skip(cuda_test::no_device()))
#define DEVICE_CASE_TEMPLATE(name, T, ...) TEST_CASE_TEMPLATE("device: " name * doctest::skip(cuda_test::no_device()), T, __VA_ARGS__)

DEVICE_CASE_TEMPLATE("per-tensor quantize (delayed, current) matches the reference", T, float, tequant::bf16, tequant::fp16) {
  test_stream s;
  tequant::cuda_backend b{s.s};
  backend_suite::check_per_tensor<T>(b);
}

DEVICE_CASE_TEMPLATE("MXFP8 quantize matches the reference", T, float, tequant::bf16, tequant::fp16) {
  test_stream s;
  tequant::cuda_backend b{s.s};
  backend_suite::check_mxfp8<T>(b);
}

DEVICE_CASE_TEMPLATE("MXFP8 zero-code and inf blocks encode as TransformerEngine (bytes as the host)", T, float,
                     tequant::bf16, tequant::fp16) {
  test_stream s;
  tequant::cuda_backend b{s.s};
  backend_suite::check_mxfp8_te_edges<T>(b);
}

DEVICE_CASE_TEMPLATE("FP8 block quantize matches the reference", T, float, tequant::bf16, tequant::fp16) {
  test_stream s;
  tequant::cuda_backend b{s.s};
  backend_suite::check_block<T>(b);
}

DEVICE_CASE("shape errors match host_backend's") {
  tequant::cuda_backend b;
  backend_suite::check_shape_errors(b);
}

// The fused amax max-accumulates into whatever the staging value holds, as the host's
// nan_ignoring_max does: a NaN or negative staging value (an imported TE history row, a NaN from a
// reduction) is replaced, never kept; an empty input still accumulates +0.
DEVICE_CASE_TEMPLATE("fused amax over odd staging values matches host_backend", T, float, tequant::bf16) {
  test_stream s;
  tequant::cuda_backend db{s.s};
  tequant::host_backend hb;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<std::vector<float>> inputs = {std::vector<float>(1000, 0.0f), {0.5f, -3.0f, nan}, {nan}, {}};
  for (const float staged : {nan, -nan, -1.0f, -0.0f, 0.0f, 2.0f}) {
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      CAPTURE(staged);
      CAPTURE(k);
      std::vector<T> xs(inputs[k].size());
      for (std::size_t i = 0; i < xs.size(); ++i) xs[i] = backend_suite::from_float<T>(inputs[k][i]);
      const std::size_t n = xs.size();
      for (const bool with_cast : {true, false}) {
        CAPTURE(with_cast);
        float hstate[3] = {1.0f, 0.0f, staged};  // scale, scale_inv, amax
        std::vector<std::uint8_t> hq(n);
        auto st = backend_suite::upload(db, std::vector<float>{1.0f, 0.0f, staged});
        auto q = db.make_buffer<std::uint8_t>(n + 1);
        auto x = backend_suite::upload(db, xs.empty() ? std::vector<T>(1) : xs);
        if (with_cast) {
          hb.quantize_tensor(xs.data(), n, &hstate[0], tequant::fp8_dtype::e4m3, hq.data(), &hstate[1], &hstate[2]);
          db.quantize_tensor(x.data(), n, st.data(), tequant::fp8_dtype::e4m3, q.data(), st.data() + 1, st.data() + 2);
          CHECK(bytes_of(db, q.data(), n) == hq);
        } else {
          hb.amax(xs.data(), n, &hstate[2]);
          db.amax(x.data(), n, st.data() + 2);
        }
        CHECK(same_floats(bytes_of(db, st.data(), 3), {hstate[0], hstate[1], hstate[2]}));
      }
    }
  }
}

// Larger inputs than the suite's (several thread blocks, every vector path) at every alignment,
// compared byte for byte with host_backend.
DEVICE_CASE_TEMPLATE("host and device quantizers are byte-identical on large inputs", T, float, tequant::bf16, tequant::fp16) {
  test_stream s;
  tequant::cuda_backend db{s.s};
  tequant::host_backend hb;
  std::mt19937 rng(42);
  const std::size_t n = (1u << 20) + 13;
  const std::vector<T> xs = backend_suite::random_values<T>(rng, n + 8, 3.0f);
  auto x = backend_suite::upload(db, xs);
  for (const auto d : {tequant::fp8_dtype::e4m3, tequant::fp8_dtype::e5m2}) {
    for (std::size_t off : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{8}}) {
      for (std::size_t out_off : {off, off + 1}) {
        CAPTURE(off);
        CAPTURE(out_off);
        const std::size_t len = n - 5;
        std::vector<std::uint8_t> hq(len);
        float hstate[3] = {37.5f, 0.0f, 0.25f};
        hb.quantize_tensor(xs.data() + off, len, &hstate[0], d, hq.data(), &hstate[1], &hstate[2]);
        auto q = db.make_buffer<std::uint8_t>(len + 16);
        auto st = backend_suite::upload(db, std::vector<float>{37.5f, 0.0f, 0.25f});
        db.quantize_tensor(x.data() + off, len, st.data(), d, q.data() + out_off, st.data() + 1, st.data() + 2);
        const auto dq = bytes_of(db, q.data() + out_off, len);
        const auto dst = bytes_of(db, st.data(), 3);
        CHECK(dq == hq);
        CHECK(same_floats(dst, {hstate[0], hstate[1], hstate[2]}));
        // Current scaling in one call.
        std::vector<std::uint8_t> hc(len);
        float hinv = 0, hamax = 0;
        hb.quantize_current(xs.data() + off, len, d, true, 1e-6f, hc.data(), &hinv, &hamax);
        auto dinv = db.make_buffer<float>(2);
        db.quantize_current(x.data() + off, len, d, true, 1e-6f, q.data() + out_off, dinv.data(), dinv.data() + 1);
        CHECK(bytes_of(db, q.data() + out_off, len) == hc);
        CHECK(same_floats(bytes_of(db, dinv.data(), 2), {hinv, hamax}));
      }
    }
  }
  // MXFP8 and block, both directions, 2D too, on shapes with several tiles per dimension; input at
  // offset 0 (the 16-byte vector path) and at offset 1 (the scalar path), both FP8 formats.
  for (const bool tile_2d : {false, true}) {
    for (const std::size_t xoff : {std::size_t{0}, std::size_t{1}}) {
      const auto d8 = xoff == 0 ? tequant::fp8_dtype::e4m3 : tequant::fp8_dtype::e5m2;
      const bool pow2 = xoff == 1;
      const std::size_t M = 640, K = 1056;  // MXFP8: multiples of 32; block: partial 128-tiles on both axes
      CAPTURE(tile_2d);
      CAPTURE(xoff);
      const auto rs = tequant::mxfp8_rowwise_scale_shape(M, K), cs = tequant::mxfp8_columnwise_scale_shape(M, K);
      std::vector<std::uint8_t> hr(M * K), hc(M * K), hrs(rs.size()), hcs(cs.size());
      hb.quantize_mxfp8(tequant::matrix_view<const T>{xs.data() + xoff, M, K}, d8, tile_2d, tequant::mxfp8_output{hr, hrs, hc, hcs});
      auto r = db.make_buffer<std::uint8_t>(M * K), c = db.make_buffer<std::uint8_t>(M * K);
      auto r_s = db.make_buffer<std::uint8_t>(rs.size()), c_s = db.make_buffer<std::uint8_t>(cs.size());
      db.quantize_mxfp8(tequant::matrix_view<const T>{x.data() + xoff, M, K}, d8, tile_2d,
                        tequant::mxfp8_output{{r.data(), M * K}, {r_s.data(), rs.size()}, {c.data(), M * K}, {c_s.data(), cs.size()}});
      CHECK(bytes_of(db, r.data(), M * K) == hr);
      CHECK(bytes_of(db, c.data(), M * K) == hc);
      CHECK(bytes_of(db, r_s.data(), rs.size()) == hrs);
      CHECK(bytes_of(db, c_s.data(), cs.size()) == hcs);
      // Rowwise only takes the shorter-tile kernel.
      db.quantize_mxfp8(tequant::matrix_view<const T>{x.data() + xoff, M, K}, d8, false,
                        tequant::mxfp8_output{{r.data(), M * K}, {r_s.data(), rs.size()}, {}, {}});
      std::vector<std::uint8_t> hr1(M * K), hrs1(rs.size());
      hb.quantize_mxfp8(tequant::matrix_view<const T>{xs.data() + xoff, M, K}, d8, false, tequant::mxfp8_output{hr1, hrs1, {}, {}});
      CHECK(bytes_of(db, r.data(), M * K) == hr1);
      CHECK(bytes_of(db, r_s.data(), rs.size()) == hrs1);

      const std::size_t BM = 650, BK = 1000;
      const auto brs = tile_2d ? tequant::block_2d_rowwise_scale_shape(BM, BK) : tequant::block_1d_rowwise_scale_shape(BM, BK);
      const auto bcs = tile_2d ? tequant::block_2d_columnwise_scale_shape(BM, BK) : tequant::block_1d_columnwise_scale_shape(BM, BK);
      std::vector<std::uint8_t> br(BM * BK), bc(BM * BK);
      std::vector<float> brsv(brs.size()), bcsv(bcs.size());
      hb.quantize_block(tequant::matrix_view<const T>{xs.data() + xoff, BM, BK}, d8, tile_2d, pow2, 0.0f,
                        tequant::block_output{br, brsv, bc, bcsv});
      auto r2 = db.make_buffer<std::uint8_t>(BM * BK), c2 = db.make_buffer<std::uint8_t>(BM * BK);
      auto r2s = db.make_buffer<float>(brs.size()), c2s = db.make_buffer<float>(bcs.size());
      db.quantize_block(tequant::matrix_view<const T>{x.data() + xoff, BM, BK}, d8, tile_2d, pow2, 0.0f,
                        tequant::block_output{{r2.data(), BM * BK}, {r2s.data(), brs.size()}, {c2.data(), BM * BK}, {c2s.data(), bcs.size()}});
      CHECK(bytes_of(db, r2.data(), BM * BK) == br);
      CHECK(bytes_of(db, c2.data(), BM * BK) == bc);
      CHECK(same_floats(bytes_of(db, r2s.data(), brs.size()), brsv));
      CHECK(same_floats(bytes_of(db, c2s.data(), bcs.size()), bcsv));
    }
  }
}

// The suite's long rows with a different magnitude per block (the eight-blocks-at-a-time paths).
DEVICE_CASE_TEMPLATE("MXFP8 and block rowwise on long rows match the reference", T, float, tequant::bf16, tequant::fp16) {
  test_stream s;
  tequant::cuda_backend b{s.s};
  backend_suite::check_wide_rows<T>(b);
}

namespace {

// Random staging amaxes with the edge cases of the update: 0 (slot untouched), NaN, inf, denormals.
std::vector<float> random_staging(std::mt19937& rng, std::size_t n) {
  std::vector<float> v(n);
  std::uniform_real_distribution<float> u(0.0f, 4.0f);
  for (auto& x : v) {
    const unsigned k = rng() % 16;
    x = k == 0 ? 0.0f : k == 1 ? NAN : k == 2 ? INFINITY : k == 3 ? 1e-42f : u(rng) * std::exp2(float(int(rng() % 20) - 10));
  }
  return v;
}

template <class Algo>
void check_update_matches_host() {
  test_stream s;
  tequant::cuda_backend db{s.s};
  const std::uint32_t lengths[] = {1, 5, 16, 3};
  const std::uint32_t sizes[] = {1, 37, 300, 129};
  std::vector<tequant::delayed_bucket<tequant::host_backend>> hosts;
  std::vector<tequant::delayed_bucket<tequant::cuda_backend>> devs;
  std::vector<tequant::delayed_update_args> args;
  for (int b = 0; b < 4; ++b) {
    hosts.emplace_back(lengths[b]);
    devs.emplace_back(lengths[b], db);
    for (std::uint32_t j = 0; j < sizes[b]; ++j) {
      hosts.back().add_slot();
      devs.back().add_slot();
    }
    args.push_back({b % 2 ? 57344.0f : 448.0f * 0.25f});
  }
  std::mt19937 rng(7);
  for (int step = 0; step < 40; ++step) {
    std::vector<tequant::delayed_bucket_view> views;
    for (int b = 0; b < 4; ++b) {
      const auto st = random_staging(rng, sizes[b]);
      std::copy(st.begin(), st.end(), hosts[b].staging().begin());
      db.upload(devs[b].staging().data(), st.data(), st.size());
      hosts[b].update(Algo{}, args[b]);
      views.push_back(devs[b].view());
    }
    db.update_delayed(std::span<const tequant::delayed_bucket_view>(views), std::span<const tequant::delayed_update_args>(args),
                      Algo{}, tequant::direction::forward);  // all four buckets, one launch
    for (int b = 0; b < 4; ++b) {
      CAPTURE(step);
      CAPTURE(b);
      const std::size_t L = lengths[b], n = sizes[b];
      std::vector<float> hh(L * n), dh(L * n), hs(n), ds(n);
      hosts[b].export_te_history(0, static_cast<std::uint32_t>(n), hh);
      devs[b].export_te_history(0, static_cast<std::uint32_t>(n), dh);
      for (std::uint32_t j = 0; j < n; ++j) hs[j] = hosts[b].scale(j);
      db.download(ds.data(), devs[b].scale_data(), n);
      CHECK(same_floats(hh, dh));
      CHECK(same_floats(hs, ds));
    }
  }
}

}  // namespace

DEVICE_CASE("one-launch delayed update of several buckets equals the host loop (window_max)") {
  check_update_matches_host<tequant::window_max>();
}
DEVICE_CASE("one-launch delayed update of several buckets equals the host loop (most_recent)") {
  check_update_matches_host<tequant::most_recent>();
}

DEVICE_CASE("a training step (casts, all-reduce, update) is captured in a CUDA graph and replayed") {
  test_stream s;
  tequant::cuda_backend db{s.s};
  tequant::host_backend hb;
  tequant::single_process comm;
  constexpr std::uint32_t slots = 6, L = 4;
  tequant::delayed_bucket<tequant::cuda_backend> dev(L, db);
  tequant::delayed_bucket<tequant::host_backend> host(L);
  std::vector<std::size_t> len;
  std::vector<tequant::device_buffer<float>> xs;
  std::vector<tequant::device_buffer<std::uint8_t>> outs;
  auto inv = db.make_buffer<float>(slots);
  for (std::uint32_t j = 0; j < slots; ++j) {
    dev.add_slot();
    host.add_slot();
    len.push_back(1000 + 517 * j);
    xs.push_back(db.make_buffer<float>(len.back()));
    outs.push_back(db.make_buffer<std::uint8_t>(len.back()));
  }
  const tequant::delayed_update_args args{448.0f};
  const tequant::delayed_bucket_view view = dev.view();  // no add_slot after this: pointers stay valid

  // Capture in global mode: any synchronising call inside (a download, a cudaMalloc) fails the capture.
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  check(cudaStreamBeginCapture(s.s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
  for (std::uint32_t j = 0; j < slots; ++j)
    db.quantize_tensor(xs[j].data(), len[j], dev.scale_ptr(j), tequant::fp8_dtype::e4m3, outs[j].data(), inv.data() + j,
                       dev.staging_ptr(j));
  comm.all_reduce_max(dev.staging().data(), slots, 0);
  db.update_delayed(std::span<const tequant::delayed_bucket_view>(&view, 1), std::span<const tequant::delayed_update_args>(&args, 1),
                    tequant::window_max{}, tequant::direction::backward);
  check(cudaStreamEndCapture(s.s, &graph), "cudaStreamEndCapture");
  check(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");

  std::mt19937 rng(3);
  std::vector<std::vector<float>> hx(slots);
  for (int step = 0; step < 8; ++step) {
    CAPTURE(step);
    for (std::uint32_t j = 0; j < slots; ++j) {
      hx[j] = backend_suite::random_values<float>(rng, len[j], std::exp2(float(int(rng() % 16) - 8)));
      db.upload(xs[j].data(), hx[j].data(), len[j]);
    }
    check(cudaGraphLaunch(exec, s.s), "cudaGraphLaunch");
    check(cudaStreamSynchronize(s.s), "cudaStreamSynchronize");
    std::vector<float> hinv(slots);
    std::vector<std::vector<std::uint8_t>> hq(slots);
    for (std::uint32_t j = 0; j < slots; ++j) {
      hq[j].resize(len[j]);
      hb.quantize_tensor(hx[j].data(), len[j], host.scale_ptr(j), tequant::fp8_dtype::e4m3, hq[j].data(), &hinv[j],
                         host.staging_ptr(j));
    }
    host.update(tequant::window_max{}, args);
    std::vector<float> hs(slots), ds(slots);
    for (std::uint32_t j = 0; j < slots; ++j) hs[j] = host.scale(j);
    db.download(ds.data(), dev.scale_data(), slots);
    CHECK(same_floats(hs, ds));
    CHECK(same_floats(hinv, bytes_of(db, inv.data(), slots)));
    for (std::uint32_t j = 0; j < slots; ++j) CHECK(bytes_of(db, outs[j].data(), len[j]) == hq[j]);
    std::vector<float> hh(L * slots), dh(L * slots);
    host.export_te_history(0, slots, hh);
    dev.export_te_history(0, slots, dh);
    CHECK(same_floats(hh, dh));
  }
  check(cudaGraphExecDestroy(exec), "cudaGraphExecDestroy");
  check(cudaGraphDestroy(graph), "cudaGraphDestroy");
}

TEST_CASE("nvcc host: CUDA failures become tequant::error naming the operation") {
  tequant::cuda_backend b;  // constructing needs no device
  if (cuda_test::no_device()) {
    CHECK_THROWS_WITH_AS(b.make_buffer<float>(16), doctest::Contains("tequant: CUDA error in cudaMalloc"), tequant::error);
  } else {
    // A failure that is reported synchronously and leaves the context usable (a copy from a bogus
    // pointer may instead fault asynchronously and poison the context): an impossible allocation.
    CHECK_THROWS_WITH_AS(b.make_buffer<float>(std::size_t{1} << 50),
                         doctest::Contains("tequant: CUDA error in cudaMalloc(device_buffer): cudaErrorMemoryAllocation"),
                         tequant::error);
    // check() cleared the error: the next operations succeed and are not blamed for it.
    auto buf = b.make_buffer<float>(4);
    b.fill(buf.data(), 4, 2.5f);
    CHECK(b.read(buf.data() + 3) == 2.5f);
    CHECK(cudaPeekAtLastError() == cudaSuccess);
  }
}
