// SPDX-License-Identifier: Apache-2.0
// Host quantizers on 64 MiB inputs beside memcpy. bytes_per_second = bytes read + bytes written, per
// second of real (wall) time: on a shared machine CPU time is shorter than what a caller waits.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "tequant/backend/host.hpp"

namespace {

constexpr std::size_t input_bytes = std::size_t{64} << 20;

template <class T>
std::vector<T> make_input(std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float f = std::sin(static_cast<float>(i) * 0.001f) * 100.0f;
    if constexpr (std::is_same_v<T, float>) v[i] = f;
    else v[i] = tequant::to_bf16(f);
  }
  return v;
}

void bm_memcpy(benchmark::State& st) {
  std::vector<std::uint8_t> src(input_bytes, 1), dst(input_bytes);
  for (auto _ : st) {
    std::memcpy(dst.data(), src.data(), input_bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * 2 * input_bytes));
}

template <class T, tequant::fp8_dtype D>
void bm_delayed(benchmark::State& st) {
  const std::size_t n = input_bytes / sizeof(T);
  const auto x = make_input<T>(n);
  std::vector<std::uint8_t> q(n);
  tequant::host_backend b;
  float scale = 2.0f, scale_inv = 0, amax = 0;
  for (auto _ : st) {
    b.quantize_tensor(x.data(), n, &scale, D, q.data(), &scale_inv, &amax);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * (sizeof(T) + 1)));
}

template <class T, tequant::fp8_dtype D>
void bm_current(benchmark::State& st) {
  const std::size_t n = input_bytes / sizeof(T);
  const auto x = make_input<T>(n);
  std::vector<std::uint8_t> q(n);
  tequant::host_backend b;
  float scale_inv = 0;
  for (auto _ : st) {
    b.quantize_current(x.data(), n, D, false, 0.0f, q.data(), &scale_inv);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  // Two passes read x twice: counted as moved bytes (read + read + write).
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * n * (2 * sizeof(T) + 1)));
}

template <class T, tequant::fp8_dtype D, bool Columnwise>
void bm_mxfp8(benchmark::State& st) {
  const std::size_t K = 4096, M = input_bytes / sizeof(T) / K, n = M * K;
  const auto x = make_input<T>(n);
  std::vector<std::uint8_t> q(n), s(Columnwise ? tequant::mxfp8_columnwise_scale_shape(M, K).size()
                                               : tequant::mxfp8_rowwise_scale_shape(M, K).size());
  tequant::host_backend b;
  const tequant::mxfp8_output o = Columnwise ? tequant::mxfp8_output{{}, {}, q, s} : tequant::mxfp8_output{q, s, {}, {}};
  for (auto _ : st) {
    b.quantize_mxfp8(tequant::matrix_view<const T>{x.data(), M, K}, D, false, o);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * (n * (sizeof(T) + 1) + s.size())));
}

// The AVX2 MXFP8 kernels called directly, as CPUs without AVX-512 run them (on CPUs with AVX-512
// host_backend picks those kernels for fp32 and bf16, so the rows above measure those).
template <class T, bool Columnwise>
void bm_mxfp8_avx2(benchmark::State& st) {
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (!tequant::detail::host_has_avx2()) {
    st.SkipWithError("this CPU has no AVX2");
    return;
  }
  std::size_t K = 4096;
  // The kernel is inlined here: with K a constant, g++ 12 warns (-Waggressive-loop-optimizations)
  // about the rowwise kernel's tail loop, which cannot run for this K. A user's K is not a constant.
  benchmark::DoNotOptimize(K);
  const std::size_t M = input_bytes / sizeof(T) / K, n = M * K;
  const auto x = make_input<T>(n);
  const tequant::scale_shape shape =
      Columnwise ? tequant::mxfp8_columnwise_scale_shape(M, K) : tequant::mxfp8_rowwise_scale_shape(M, K);
  std::vector<std::uint8_t> q(n), s(shape.size());
  const bool stream = n >= tequant::detail::streaming_store_min_bytes;  // as host_backend asks
  for (auto _ : st) {
    constexpr auto D = tequant::fp8_dtype::e4m3;
    if constexpr (Columnwise)
      tequant::detail::avx2::mxfp8_columnwise<D>(x.data(), M, K, q.data(), s.data(), shape.cols, stream);
    else
      tequant::detail::avx2::mxfp8_rowwise<D>(x.data(), M, K, q.data(), s.data(), shape.cols, stream);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * (n * (sizeof(T) + 1) + s.size())));
#else
  st.SkipWithError("no x86 target attributes in this build");
#endif
}

template <class T, tequant::fp8_dtype D, bool Tile2d>
void bm_block(benchmark::State& st) {
  const std::size_t K = 4096, M = input_bytes / sizeof(T) / K, n = M * K;
  const auto x = make_input<T>(n);
  std::vector<std::uint8_t> q(n);
  std::vector<float> s(Tile2d ? tequant::block_2d_rowwise_scale_shape(M, K).size() : tequant::block_1d_rowwise_scale_shape(M, K).size());
  tequant::host_backend b;
  for (auto _ : st) {
    b.quantize_block(tequant::matrix_view<const T>{x.data(), M, K}, D, Tile2d, true, 0.0f, tequant::block_output{q, s, {}, {}});
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * (n * (sizeof(T) + 1) + s.size() * 4)));
}

// The AVX2 block-scaling kernels called directly, as CPUs without AVX-512 run them: 1x128 tiles over
// the whole matrix in one call (host_backend calls them per 128 rows), 128x128 as host_backend does.
template <class T, bool Tile2d>
void bm_block_avx2(benchmark::State& st) {
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  if (!tequant::detail::host_has_avx2()) {
    st.SkipWithError("this CPU has no AVX2");
    return;
  }
  std::size_t K = 4096;
  benchmark::DoNotOptimize(K);  // as in bm_mxfp8_avx2
  const std::size_t M = input_bytes / sizeof(T) / K, n = M * K, KB = K / 128;
  const auto x = make_input<T>(n);
  std::vector<std::uint8_t> q(n);
  std::vector<float> s(Tile2d ? (M / 128) * KB : M * KB);
  const bool stream = n >= tequant::detail::streaming_store_min_bytes;  // as host_backend asks
  constexpr float vinf = tequant::detail::input_type_max<T>();
  for (auto _ : st) {
    constexpr auto D = tequant::fp8_dtype::e4m3;
    if constexpr (Tile2d)
      tequant::detail::avx2::block_2d<D>(x.data(), M, K, q.data(), s.data(), true, 0.0f, vinf, stream);
    else
      tequant::detail::avx2::block_rowwise<D>(x.data(), M, K, q.data(), s.data(), M, true, 0.0f, vinf, stream);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * (n * (sizeof(T) + 1) + s.size() * 4)));
#else
  st.SkipWithError("no x86 target attributes in this build");
#endif
}

// NVFP4: two passes (the tensor's amax, then the cast) read x twice, counted like current scaling's;
// writes are half a byte per element plus one E4M3 scale byte per 16 elements. With Rht the columnwise
// copy goes through the 16x16 random Hadamard transform (its fp32 scratch copy is not counted); Tile2d:
// one scale per 16x16 tile (TE's weights).
template <class T, bool Columnwise, bool Stochastic, bool Rht = false, bool Tile2d = false>
void bm_nvfp4(benchmark::State& st) {
  const std::size_t K = 4096, M = input_bytes / sizeof(T) / K, n = M * K;
  const auto x = make_input<T>(n);
  std::vector<std::uint8_t> q(n / 2), s(Columnwise ? tequant::nvfp4_columnwise_scale_shape(M, K).size()
                                                   : tequant::nvfp4_rowwise_scale_shape(M, K).size());
  std::vector<float> g(1);
  std::uint64_t offset = 0;
  const tequant::nvfp4_options opt{Tile2d, Stochastic ? &offset : nullptr, 1, Rht};
  const tequant::nvfp4_output o = Columnwise ? tequant::nvfp4_output{{}, {}, {}, q, s, g} : tequant::nvfp4_output{q, s, g, {}, {}, {}};
  tequant::host_backend b;
  for (auto _ : st) {
    b.quantize_nvfp4(tequant::matrix_view<const T>{x.data(), M, K}, opt, o);
    benchmark::DoNotOptimize(q.data());
    benchmark::ClobberMemory();
  }
  st.SetBytesProcessed(static_cast<std::int64_t>(st.iterations() * (n * 2 * sizeof(T) + n / 2 + s.size())));
}

using tequant::bf16;
using tequant::fp8_dtype;

}  // namespace

BENCHMARK(bm_memcpy)->Name("memcpy/64MiB")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_delayed<float, fp8_dtype::e4m3>)->Name("delayed/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_delayed<float, fp8_dtype::e5m2>)->Name("delayed/fp32/e5m2")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_delayed<bf16, fp8_dtype::e4m3>)->Name("delayed/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_current<float, fp8_dtype::e4m3>)->Name("current/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_current<bf16, fp8_dtype::e4m3>)->Name("current/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_mxfp8<float, fp8_dtype::e4m3, false>)->Name("mxfp8_rowwise/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_mxfp8<bf16, fp8_dtype::e4m3, false>)->Name("mxfp8_rowwise/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_mxfp8<float, fp8_dtype::e4m3, true>)->Name("mxfp8_columnwise/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_mxfp8<bf16, fp8_dtype::e4m3, true>)->Name("mxfp8_columnwise/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_mxfp8_avx2<float, false>)->Name("mxfp8_rowwise_avx2/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_mxfp8_avx2<bf16, false>)->Name("mxfp8_rowwise_avx2/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_mxfp8_avx2<float, true>)->Name("mxfp8_columnwise_avx2/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_mxfp8_avx2<bf16, true>)->Name("mxfp8_columnwise_avx2/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_block<float, fp8_dtype::e4m3, false>)->Name("block_1x128/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_block<bf16, fp8_dtype::e4m3, false>)->Name("block_1x128/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_block<float, fp8_dtype::e4m3, true>)->Name("block_128x128/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_block<bf16, fp8_dtype::e4m3, true>)->Name("block_128x128/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_block_avx2<float, false>)->Name("block_1x128_avx2/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_block_avx2<bf16, false>)->Name("block_1x128_avx2/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_block_avx2<float, true>)->Name("block_128x128_avx2/fp32/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_block_avx2<bf16, true>)->Name("block_128x128_avx2/bf16/e4m3")->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK(bm_nvfp4<float, false, false>)->Name("nvfp4_rowwise/fp32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_nvfp4<bf16, false, false>)->Name("nvfp4_rowwise/bf16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_nvfp4<float, false, true>)->Name("nvfp4_rowwise_sr/fp32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_nvfp4<float, false, false, false, true>)->Name("nvfp4_rowwise_2d/fp32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_nvfp4<float, true, false, false, true>)->Name("nvfp4_columnwise_2d/fp32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_nvfp4<float, true, true>)->Name("nvfp4_columnwise_sr/fp32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_nvfp4<float, true, false>)->Name("nvfp4_columnwise/fp32")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_nvfp4<bf16, true, false>)->Name("nvfp4_columnwise/bf16")->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bm_nvfp4<bf16, true, false, true>)->Name("nvfp4_columnwise_rht/bf16")->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK_MAIN();
