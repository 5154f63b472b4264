// SPDX-License-Identifier: Apache-2.0
// CUDA backend throughput: every quantizer (NVFP4 included) on inputs larger than L2 (256 MiB), the device copy
// bandwidth measured in the same run as the yardstick, and the one-launch delayed update of 3000
// slots at L = 1024. Times come from CUDA events (median of many runs); bytes are those actually
// moved (current scaling reads its input twice).
//
// Two front ends over the same cases: Google Benchmark (default; manual time, JSON via
// --benchmark_out) and, with -DTEQUANT_BENCH_STANDALONE, a plain main that needs nothing but nvcc,
// checks each quantizer against host_backend on a smaller input first and prints a table
// (scripts/gpu-check.sh uses it so that a machine without libbenchmark-dev still gets numbers).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tequant/backend/cuda/backend.cuh"
#include "tequant/backend/host.hpp"
#include "tequant/recipe/delayed.hpp"

#ifndef TEQUANT_BENCH_STANDALONE
#  include <benchmark/benchmark.h>
#endif

namespace {

using tequant::detail::check;
constexpr std::size_t input_bytes = std::size_t{256} << 20;

// Deterministic pseudo-random values (a hash of index and seed), generated on the device so that
// every run starts from fresh data without a 256 MiB upload.
__global__ void random_fill(float* p, std::size_t n, std::uint32_t seed) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
    std::uint32_t h = static_cast<std::uint32_t>(i) * 0x9E3779B1u ^ seed;
    h ^= h >> 15; h *= 0x2C1B3C6Du; h ^= h >> 12; h *= 0x297A2D39u; h ^= h >> 15;
    p[i] = (static_cast<float>(h & 0xFFFFFF) / 16777216.0f - 0.5f) * static_cast<float>(1u << ((h >> 24) & 7));
  }
}
__global__ void to_bf16_kernel(const float* in, tequant::bf16* out, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x)
    out[i] = tequant::to_bf16(in[i]);
}

struct bench_case {
  bench_case(std::string n, double b, std::function<void()> r, bool update = false, std::function<void()> prep = {})
      : name(std::move(n)), bytes(b), run(std::move(r)), is_update(update), before(std::move(prep)) {}
  std::string name;
  double bytes;                 // moved per run
  std::function<void()> run;    // enqueues one run on the stream
  bool is_update;               // reported in microseconds, not as a bandwidth
  std::function<void()> before; // untimed preparation before each run (update: refill staging)
};

struct fixture {
  cudaStream_t stream{};
  tequant::cuda_backend b;
  std::size_t n32 = input_bytes / 4, n16 = input_bytes / 2;
  tequant::device_buffer<float> x32, copy_dst, state;
  tequant::device_buffer<tequant::bf16> x16;
  tequant::device_buffer<std::uint8_t> q0, q1, s0, s1;
  std::unique_ptr<tequant::delayed_bucket<tequant::cuda_backend>> bucket;
  std::vector<float> staging_host;
  std::uint64_t rng_offset = 0;  // NVFP4 stochastic rounding's stream position (host memory)

  fixture() {
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    b = tequant::cuda_backend{stream};
    x32 = tequant::device_buffer<float>(n32);
    x16 = tequant::device_buffer<tequant::bf16>(n16);
    copy_dst = tequant::device_buffer<float>(n32);
    q0 = tequant::device_buffer<std::uint8_t>(n16);
    q1 = tequant::device_buffer<std::uint8_t>(n16);
    s0 = tequant::device_buffer<std::uint8_t>(n16 / 16);  // room for any scale tensor below (fp32, 1x128)
    s1 = tequant::device_buffer<std::uint8_t>(n16 / 16);
    state = b.make_buffer<float>(10);
    b.fill(state.data(), 1, 3.5f);
    refresh(1);
    bucket = std::make_unique<tequant::delayed_bucket<tequant::cuda_backend>>(1024, b);
    for (int j = 0; j < 3000; ++j) bucket->add_slot();
    staging_host.resize(3000);
    for (int j = 0; j < 3000; ++j) staging_host[j] = 0.5f + static_cast<float>((j * 7919) % 1000) / 100.0f;
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  ~fixture() { (void)cudaStreamDestroy(stream); }

  void refresh(std::uint32_t seed) {
    random_fill<<<4096, 256, 0, stream>>>(x32.data(), n32, seed);
    random_fill<<<4096, 256, 0, stream>>>(copy_dst.data(), n32, seed * 3 + 1);
    to_bf16_kernel<<<4096, 256, 0, stream>>>(copy_dst.data(), x16.data(), n16 < n32 ? n16 : n32);
    to_bf16_kernel<<<4096, 256, 0, stream>>>(x32.data(), x16.data() + n32, n16 - n32);
    check(cudaGetLastError(), "random_fill");
  }

  template <class T>
  tequant::mxfp8_output mx(std::size_t M, std::size_t K, bool row, bool col) {
    const auto rs = tequant::mxfp8_rowwise_scale_shape(M, K), cs = tequant::mxfp8_columnwise_scale_shape(M, K);
    tequant::mxfp8_output o{};
    if (row) o.rowwise_data = {q0.data(), M * K}, o.rowwise_scale = {s0.data(), rs.size()};
    if (col) o.columnwise_data = {q1.data(), M * K}, o.columnwise_scale = {s1.data(), cs.size()};
    return o;
  }
  tequant::block_output blk(std::size_t M, std::size_t K, bool two_d, bool row, bool col) {
    const auto rs = two_d ? tequant::block_2d_rowwise_scale_shape(M, K) : tequant::block_1d_rowwise_scale_shape(M, K);
    const auto cs = two_d ? tequant::block_2d_columnwise_scale_shape(M, K) : tequant::block_1d_columnwise_scale_shape(M, K);
    tequant::block_output o{};
    if (row) o.rowwise_data = {q0.data(), M * K}, o.rowwise_scale_inv = {reinterpret_cast<float*>(s0.data()), rs.size()};
    if (col) o.columnwise_data = {q1.data(), M * K}, o.columnwise_scale_inv = {reinterpret_cast<float*>(s1.data()), cs.size()};
    return o;
  }

  // NVFP4 outputs: data two codes a byte, E4M3 scales, the global decode scales in state[8], state[9].
  tequant::nvfp4_output fp4(std::size_t M, std::size_t K, bool row, bool col) {
    const auto rs = tequant::nvfp4_rowwise_scale_shape(M, K), cs = tequant::nvfp4_columnwise_scale_shape(M, K);
    tequant::nvfp4_output o{};
    if (row) o.rowwise_data = {q0.data(), M * K / 2}, o.rowwise_scale = {s0.data(), rs.size()}, o.rowwise_global_scale_inv = {state.data() + 8, 1};
    if (col) o.columnwise_data = {q1.data(), M * K / 2}, o.columnwise_scale = {s1.data(), cs.size()}, o.columnwise_global_scale_inv = {state.data() + 9, 1};
    return o;
  }

  std::vector<bench_case> cases() {
    using tequant::fp8_dtype;
    std::vector<bench_case> c;
    const double in = static_cast<double>(input_bytes);
    const std::size_t M32 = 8192, K32 = n32 / 8192, M16 = 16384, K16 = n16 / 16384;
    const tequant::matrix_view<const float> m32{x32.data(), M32, K32};
    const tequant::matrix_view<const tequant::bf16> m16{x16.data(), M16, K16};
    c.push_back({"copy (cudaMemcpyAsync D2D)", 2 * in, [this] {
                   check(cudaMemcpyAsync(copy_dst.data(), x32.data(), input_bytes, cudaMemcpyDeviceToDevice, stream), "copy");
                 }});
    c.push_back({"tensor fp32 delayed (cast+amax)", in + n32, [this] {
                   b.quantize_tensor(x32.data(), n32, state.data(), fp8_dtype::e4m3, q0.data(), state.data() + 1, state.data() + 2);
                 }});
    c.push_back({"tensor bf16 delayed (cast+amax)", in + n16, [this] {
                   b.quantize_tensor(x16.data(), n16, state.data(), fp8_dtype::e4m3, q0.data(), state.data() + 1, state.data() + 2);
                 }});
    c.push_back({"tensor bf16 current (amax, scale, cast)", 2 * in + n16, [this] {
                   b.amax(x16.data(), n16, state.data() + 3);
                   b.compute_scale(state.data() + 3, fp8_dtype::e4m3, false, 0.0f, state.data() + 4, state.data() + 5);
                   b.quantize_tensor(x16.data(), n16, state.data() + 4, fp8_dtype::e4m3, q0.data(), nullptr, nullptr);
                 }});
    c.push_back({"mxfp8 bf16 rowwise", in + n16 + n16 / 32.0, [=, this] {
                   b.quantize_mxfp8(m16, fp8_dtype::e4m3, false, mx<tequant::bf16>(M16, K16, true, false));
                 }});
    c.push_back({"mxfp8 bf16 row+col", in + 2.0 * n16 + n16 / 16.0, [=, this] {
                   b.quantize_mxfp8(m16, fp8_dtype::e4m3, false, mx<tequant::bf16>(M16, K16, true, true));
                 }});
    c.push_back({"mxfp8 fp32 row+col", in + 2.0 * n32 + n32 / 16.0, [=, this] {
                   b.quantize_mxfp8(m32, fp8_dtype::e4m3, false, mx<float>(M32, K32, true, true));
                 }});
    c.push_back({"block 1x128 bf16 rowwise", in + n16 + n16 / 32.0, [=, this] {
                   b.quantize_block(m16, fp8_dtype::e4m3, false, true, 0.0f, blk(M16, K16, false, true, false));
                 }});
    c.push_back({"block 1x128 bf16 row+col(T)", in + 2.0 * n16 + n16 / 16.0, [=, this] {
                   b.quantize_block(m16, fp8_dtype::e4m3, false, true, 0.0f, blk(M16, K16, false, true, true));
                 }});
    c.push_back({"block 128x128 bf16 row+col(T)", in + 2.0 * n16, [=, this] {
                   b.quantize_block(m16, fp8_dtype::e4m3, true, true, 0.0f, blk(M16, K16, true, true, true));
                 }});
    // NVFP4 reads x once for the amax and once per direction (one thread per 16-element block).
    c.push_back({"nvfp4 bf16 rowwise", 2 * in + n16 / 2.0 + n16 / 16.0, [=, this] {
                   b.quantize_nvfp4(m16, tequant::nvfp4_options{}, fp4(M16, K16, true, false));
                 }});
    c.push_back({"nvfp4 bf16 rowwise SR", 2 * in + n16 / 2.0 + n16 / 16.0, [=, this] {
                   b.quantize_nvfp4(m16, tequant::nvfp4_options{false, &rng_offset, 1}, fp4(M16, K16, true, false));
                 }});
    c.push_back({"nvfp4 bf16 row+col(T)", 3 * in + n16 + n16 / 8.0, [=, this] {
                   b.quantize_nvfp4(m16, tequant::nvfp4_options{}, fp4(M16, K16, true, true));
                 }});
    c.push_back({"nvfp4 bf16 16x16 row+col(T)", 3 * in + n16 + n16 / 8.0, [=, this] {
                   b.quantize_nvfp4(m16, tequant::nvfp4_options{true, nullptr, 0}, fp4(M16, K16, true, true));
                 }});
    // With the random Hadamard transform x is read twice more for the columnwise copy (the transformed
    // amax pass, then the cast, which transforms again).
    c.push_back({"nvfp4 bf16 row+col(T) RHT", 4 * in + n16 + n16 / 8.0, [=, this] {
                   b.quantize_nvfp4(m16, tequant::nvfp4_options{false, nullptr, 0, true}, fp4(M16, K16, true, true));
                 }});
    bench_case up{"delayed update 3000 slots L=1024 (1 launch)", 0, [this] { bucket->update(tequant::window_max{}, {448.0f}); }, true,
                  [this] { b.upload(bucket->staging().data(), staging_host.data(), staging_host.size()); }};
    c.push_back(up);
    return c;
  }
};

bool have_device() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  // Say why (no driver, driver older than the toolkit, ...): on the GPU machine this is a failure.
  if (e != cudaSuccess) std::fprintf(stderr, "bench_cuda: cudaGetDeviceCount: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
  return e == cudaSuccess && n > 0;
}

}  // namespace

#ifdef TEQUANT_BENCH_STANDALONE

namespace {

// Median time of `reps` runs in milliseconds, each bracketed by its own pair of events.
double median_ms(fixture& f, const bench_case& c, int reps) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  std::vector<float> t;
  for (int i = 0; i < reps + 3; ++i) {
    if (c.before) c.before();
    check(cudaEventRecord(e0, f.stream), "cudaEventRecord");
    c.run();
    check(cudaEventRecord(e1, f.stream), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    if (i >= 3) t.push_back(ms);  // three warm-up runs
  }
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Device against host_backend on a 4 Mi-element slice: the numbers below mean nothing if this fails.
bool self_check(fixture& f) {
  tequant::host_backend hb;
  const std::size_t M = 1024, K = 4096, n = M * K;
  std::vector<tequant::bf16> x(n);
  f.b.download(x.data(), f.x16.data(), n);
  bool ok = true;
  auto same = [&](const char* what, const std::vector<std::uint8_t>& h, const std::uint8_t* d) {
    std::vector<std::uint8_t> g(h.size());
    f.b.download(g.data(), d, g.size());
    const bool eq = g == h;
    std::printf("self-check %-28s %s\n", what, eq ? "ok" : "MISMATCH");
    ok = ok && eq;
  };
  {
    std::vector<std::uint8_t> h(n);
    float s = 3.5f, inv = 0, amax = 0;
    hb.quantize_tensor(x.data(), n, &s, tequant::fp8_dtype::e4m3, h.data(), &inv, &amax);
    f.b.fill(f.state.data() + 6, 1, 0.0f);
    f.b.quantize_tensor(f.x16.data(), n, f.state.data(), tequant::fp8_dtype::e4m3, f.q0.data(), nullptr, f.state.data() + 6);
    same("tensor bf16", h, f.q0.data());
    const bool amax_ok = f.b.read(f.state.data() + 6) == amax;
    std::printf("self-check %-28s %s\n", "tensor bf16 amax", amax_ok ? "ok" : "MISMATCH");
    ok = ok && amax_ok;
  }
  {
    const auto rs = tequant::mxfp8_rowwise_scale_shape(M, K), cs = tequant::mxfp8_columnwise_scale_shape(M, K);
    std::vector<std::uint8_t> r(n), c(n), rsc(rs.size()), csc(cs.size());
    hb.quantize_mxfp8(tequant::matrix_view<const tequant::bf16>{x.data(), M, K}, tequant::fp8_dtype::e4m3, false,
                      tequant::mxfp8_output{r, rsc, c, csc});
    f.b.quantize_mxfp8(tequant::matrix_view<const tequant::bf16>{f.x16.data(), M, K}, tequant::fp8_dtype::e4m3, false,
                       f.mx<tequant::bf16>(M, K, true, true));
    same("mxfp8 rowwise data", r, f.q0.data());
    same("mxfp8 columnwise data", c, f.q1.data());
    same("mxfp8 rowwise scales", rsc, f.s0.data());
    same("mxfp8 columnwise scales", csc, f.s1.data());
  }
  {
    std::vector<std::uint8_t> r(n), c(n);
    const auto rs = tequant::block_1d_rowwise_scale_shape(M, K), cs = tequant::block_1d_columnwise_scale_shape(M, K);
    std::vector<float> rsc(rs.size()), csc(cs.size());
    hb.quantize_block(tequant::matrix_view<const tequant::bf16>{x.data(), M, K}, tequant::fp8_dtype::e4m3, false, true, 0.0f,
                      tequant::block_output{r, rsc, c, csc});
    f.b.quantize_block(tequant::matrix_view<const tequant::bf16>{f.x16.data(), M, K}, tequant::fp8_dtype::e4m3, false, true, 0.0f,
                       f.blk(M, K, false, true, true));
    same("block 1x128 rowwise data", r, f.q0.data());
    same("block 1x128 columnwise data", c, f.q1.data());
    // The scales compared as bytes: the byte compare above only covers the data.
    const auto as_bytes = [](const std::vector<float>& v) {
      std::vector<std::uint8_t> b(v.size() * sizeof(float));
      std::memcpy(b.data(), v.data(), b.size());
      return b;
    };
    same("block 1x128 rowwise scales", as_bytes(rsc), f.s0.data());
    same("block 1x128 columnwise scales", as_bytes(csc), f.s1.data());
  }
  for (const int mode : {0, 1, 2}) {  // NVFP4 both directions: round to nearest, stochastic, RHT (nearest)
    const bool sr = mode == 1, rht = mode == 2;
    const auto rs = tequant::nvfp4_rowwise_scale_shape(M, K), cs = tequant::nvfp4_columnwise_scale_shape(M, K);
    std::vector<std::uint8_t> r(n / 2), c(n / 2), rsc(rs.size()), csc(cs.size());
    std::vector<float> g(2);
    std::uint64_t host_offset = 40, dev_offset = 40;
    hb.quantize_nvfp4(tequant::matrix_view<const tequant::bf16>{x.data(), M, K}, tequant::nvfp4_options{false, sr ? &host_offset : nullptr, 9, rht},
                      tequant::nvfp4_output{r, rsc, std::span(g).first(1), c, csc, std::span(g).last(1)});
    f.b.quantize_nvfp4(tequant::matrix_view<const tequant::bf16>{f.x16.data(), M, K}, tequant::nvfp4_options{false, sr ? &dev_offset : nullptr, 9, rht},
                       f.fp4(M, K, true, true));
    const char* const names[3][4] = {
        {"nvfp4 rowwise data", "nvfp4 columnwise data", "nvfp4 rowwise scales", "nvfp4 columnwise scales"},
        {"nvfp4 SR rowwise data", "nvfp4 SR columnwise data", "nvfp4 SR rowwise scales", "nvfp4 SR columnwise scales"},
        {"nvfp4 RHT rowwise data", "nvfp4 RHT columnwise data", "nvfp4 RHT rowwise scales", "nvfp4 RHT columnwise scales"}};
    same(names[mode][0], r, f.q0.data());
    same(names[mode][1], c, f.q1.data());
    same(names[mode][2], rsc, f.s0.data());
    same(names[mode][3], csc, f.s1.data());
    const bool g_ok = f.b.read(f.state.data() + 8) == g[0] && f.b.read(f.state.data() + 9) == g[1] && host_offset == dev_offset;
    std::printf("self-check %-28s %s\n", "nvfp4 global scales, offset", g_ok ? "ok" : "MISMATCH");
    ok = ok && g_ok;
  }
  return ok;
}

}  // namespace

int main() {
  if (!have_device()) {
    std::printf("bench_cuda: no CUDA device; nothing measured\n");
    return 2;
  }
  fixture f;
  const bool ok = self_check(f);
  f.refresh(12345);  // fresh data for the timed runs
  const auto cases = f.cases();
  double copy_bw = 0;
  std::printf("\n%-44s %12s %10s %10s %8s\n", "kernel (256 MiB input)", "MB moved", "median us", "GB/s", "vs copy");
  for (const auto& c : cases) {
    const double ms = median_ms(f, c, c.is_update ? 200 : 30);
    if (c.is_update) {
      std::printf("%-44s %12s %10.2f %10s %8s\n", c.name.c_str(), "-", ms * 1e3, "-", "-");
      std::printf("RESULT update_us %.3f\n", ms * 1e3);
      continue;
    }
    const double bw = c.bytes / (ms * 1e-3) / 1e9;
    if (copy_bw == 0) copy_bw = bw;
    std::printf("%-44s %12.1f %10.1f %10.1f %7.1f%%\n", c.name.c_str(), c.bytes / 1e6, ms * 1e3, bw, 100.0 * bw / copy_bw);
    std::printf("RESULT %s|%.3f|%.1f\n", c.name.c_str(), ms * 1e3, bw);
  }
  std::printf("self-check overall: %s\n", ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}

#else

static void bm_cuda(benchmark::State& st, int index) {
  if (!have_device()) {
    st.SkipWithError("no CUDA device");
    return;
  }
  static fixture* f = nullptr;  // 1.3 GiB of buffers, built once for all cases
  if (f == nullptr) f = new fixture();
  f->refresh(static_cast<std::uint32_t>(index) + 7);  // fresh data for each case
  const auto cases = f->cases();
  const auto& c = cases[static_cast<std::size_t>(index)];
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  for (auto _ : st) {
    if (c.before) c.before();
    check(cudaEventRecord(e0, f->stream), "cudaEventRecord");
    c.run();
    check(cudaEventRecord(e1, f->stream), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "cudaEventElapsedTime");
    st.SetIterationTime(ms * 1e-3);
  }
  (void)cudaEventDestroy(e0);
  (void)cudaEventDestroy(e1);
  if (!c.is_update) st.SetBytesProcessed(static_cast<std::int64_t>(c.bytes * static_cast<double>(st.iterations())));
  st.SetLabel(c.name);
}

// Case indices follow fixture::cases(); names are fixed here so no device is needed to register them.
static const char* const case_names[] = {"copy", "tensor_fp32_delayed", "tensor_bf16_delayed", "tensor_bf16_current",
                                         "mxfp8_bf16_rowwise", "mxfp8_bf16_rowcol", "mxfp8_fp32_rowcol",
                                         "block1d_bf16_rowwise", "block1d_bf16_rowcol", "block2d_bf16_rowcol",
                                         "nvfp4_bf16_rowwise", "nvfp4_bf16_rowwise_sr", "nvfp4_bf16_rowcol",
                                         "nvfp4_2d_bf16_rowcol", "delayed_update_3000x1024"};

int main(int argc, char** argv) {
  for (int i = 0; i < static_cast<int>(sizeof(case_names) / sizeof(case_names[0])); ++i)
    benchmark::RegisterBenchmark((std::string("cuda/") + case_names[i]).c_str(), bm_cuda, i)
        ->UseManualTime()
        ->MinTime(0.1)
        ->Repetitions(5)
        ->ReportAggregatesOnly(true);  // mean, median, stddev of the five repetitions
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
}

#endif
