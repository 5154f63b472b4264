// SPDX-License-Identifier: Apache-2.0
// Distributed amax reduction: one backward update of 1000 delayed-scaling slots through the manager
// with mpi_comm, beside one raw MPI_Allreduce(MPI_MAX) of the same 1000 floats; when built with
// libtorch's c10d/Gloo (TEQUANT_BENCH_C10D), the same rows over c10d_comm and a hand-written Gloo
// allreduce, on a ProcessGroupGloo of the same ranks (mpirun only starts them). Run under mpirun;
// only rank 0 reports. Every benchmark has a fixed iteration count, because each iteration is a
// collective and Google Benchmark's adaptive count would differ between ranks (and hang).
//   mpirun --allow-run-as-root --oversubscribe -np 2 ./bench_comm --benchmark_out=bench_comm_np2.json
#include <benchmark/benchmark.h>
#include <mpi.h>
#ifdef TEQUANT_BENCH_C10D
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <filesystem>

#include "tequant/integration/c10d_comm.hpp"
#endif

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/comm/mpi.hpp"
#include "tequant/comm/single_process.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace {

#ifdef TEQUANT_BENCH_C10D
/// The Gloo group over the mpirun ranks (set up in main, before any benchmark).
c10::intrusive_ptr<c10d::ProcessGroup>& gloo_world() {
  static c10::intrusive_ptr<c10d::ProcessGroup> g;
  return g;
}
#endif

constexpr std::uint32_t slots = 1000;  // 500 modules x 2 backward slots
constexpr int iterations = 20000;

template <class Comm>
using manager_t = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::explicit_scope,
                                                tequant::stacked_recompute, Comm>;

/// Rank-dependent amaxes so the reduction has real work; refreshed before every update (an update
/// resets the staging amaxes, and a zero amax would take TE's cheap "untouched" path).
std::vector<float> source_amaxes() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::vector<float> v(slots);
  for (std::uint32_t i = 0; i < slots; ++i) v[i] = 1.0f + static_cast<float>((i * 7919u + static_cast<unsigned>(rank) * 104729u) % 1000u);
  return v;
}

/// range(0): layout check on/off (mpi_comm only); range(1): history length.
template <class Comm>
void bm_manager_update(benchmark::State& state) {
  tequant::delayed_params p;  // TE defaults (history 1024, reduce_amax) unless range(1) says otherwise
  p.history_length = static_cast<std::uint32_t>(state.range(1));
  std::unique_ptr<manager_t<Comm>> m;
  if constexpr (std::is_same_v<Comm, tequant::mpi_comm>)
    m = std::make_unique<manager_t<Comm>>(p, tequant::explicit_scope{},
                                          tequant::mpi_comm(MPI_COMM_WORLD, {state.range(0) != 0}));
#ifdef TEQUANT_BENCH_C10D
  else if constexpr (std::is_same_v<Comm, tequant::c10d_comm>)
    m = std::make_unique<manager_t<Comm>>(p, tequant::explicit_scope{},
                                          tequant::c10d_comm(gloo_world(), {state.range(0) != 0}));
#endif
  else
    m = std::make_unique<manager_t<Comm>>(p);
  for (std::uint32_t i = 0; i < slots / 2; ++i) (void)m->register_module("linear" + std::to_string(i));
  const std::vector<float> src = source_amaxes();
  std::uint32_t bwd = 0;
  while (m->bucket(bwd).dir != tequant::direction::backward) ++bwd;
  const std::span<float> staging = m->recipe_state()[bwd].staging();
  const auto c0 = m->stats().collectives;
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    std::copy(src.begin(), src.end(), staging.begin());  // what the backward casts would record
    auto scope = m->backward_scope();                    // exit = flush: all-reduce + fused update
  }
  state.counters["collectives_per_step"] =
      static_cast<double>(m->stats().collectives - c0) / static_cast<double>(state.iterations());
  state.counters["slots"] = slots;
}

void bm_raw_allreduce(benchmark::State& state) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  const std::vector<float> src = source_amaxes();
  std::vector<float> buf(slots);
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    std::copy(src.begin(), src.end(), buf.begin());
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(slots), MPI_FLOAT, MPI_MAX, comm);
    benchmark::DoNotOptimize(buf.data());
  }
  state.counters["collectives_per_step"] = 1;
  state.counters["slots"] = slots;
  MPI_Comm_free(&comm);
}

/// Hand-written baseline: what a user would code without tequant's manager on the same state layout,
/// one MPI_Allreduce(MPI_FLOAT, MPI_MAX) of the staging amaxes then the fused update loop. The
/// manager's distributed update over this one is tequant's whole overhead (bookkeeping, the NaN-aware
/// key encode/decode), with the same local work and the same rank skew on both sides.
void bm_handwritten_update(benchmark::State& state) {
  const auto L = static_cast<std::uint32_t>(state.range(0));
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  tequant::delayed_bucket<tequant::host_backend> bucket(L);
  for (std::uint32_t i = 0; i < slots; ++i) (void)bucket.add_slot();
  const tequant::delayed_update_args args{tequant::delayed_scaling<>::scaled_max(tequant::fp8_dtype::e5m2, 0)};
  const std::vector<float> src = source_amaxes();
  const std::span<float> staging = bucket.staging();
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    std::copy(src.begin(), src.end(), staging.begin());
    MPI_Allreduce(MPI_IN_PLACE, staging.data(), static_cast<int>(slots), MPI_FLOAT, MPI_MAX, comm);
    tequant::delayed_update_bucket_host(bucket.view(), tequant::window_max{}, args);
  }
  state.counters["collectives_per_step"] = 1;
  state.counters["slots"] = slots;
  MPI_Comm_free(&comm);
}

/// mpi_comm::all_reduce_max alone (key encode + MPI_Allreduce on uint32 + decode): what the comm adds.
void bm_mpi_comm_all_reduce_max(benchmark::State& state) {
  tequant::mpi_comm comm;
  const std::vector<float> src = source_amaxes();
  std::vector<float> buf(slots);
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    std::copy(src.begin(), src.end(), buf.begin());
    comm.all_reduce_max(buf.data(), slots, 0);
    benchmark::DoNotOptimize(buf.data());
  }
  state.counters["collectives_per_step"] = 1;
  state.counters["slots"] = slots;
}

// All ranks run every benchmark (single_process ones too) so the sequence of collectives matches.
BENCHMARK(bm_raw_allreduce)->Iterations(iterations)->Repetitions(5)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_mpi_comm_all_reduce_max)->Iterations(iterations)->Repetitions(5)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_handwritten_update)->ArgName("history")->Arg(1024)->Arg(16)
    ->Iterations(iterations)->Repetitions(5)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_manager_update, tequant::mpi_comm)
    ->ArgNames({"layout_check", "history"})->Args({0, 1024})->Args({0, 16})
    ->Iterations(iterations)->Repetitions(5)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_manager_update, tequant::single_process)
    ->ArgNames({"layout_check", "history"})->Args({0, 1024})->Args({0, 16})
    ->Iterations(iterations)->Repetitions(5)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_manager_update, tequant::mpi_comm)
    ->ArgNames({"layout_check", "history"})->Args({1, 1024})
    ->Iterations(iterations / 4)->Repetitions(3)->Unit(benchmark::kMicrosecond);

#ifdef TEQUANT_BENCH_C10D
constexpr int c10d_iterations = 500;  // a Gloo allreduce costs 0.8-14 ms here (ranks, machine load)

/// The c10d counterpart of bm_handwritten_update: one Gloo allreduce (float MAX) of the staging
/// amaxes, as a libtorch user would write it, then the same fused update loop.
void bm_c10d_handwritten_update(benchmark::State& state) {
  const auto L = static_cast<std::uint32_t>(state.range(0));
  c10d::ProcessGroup& pg = *gloo_world();
  tequant::delayed_bucket<tequant::host_backend> bucket(L);
  for (std::uint32_t i = 0; i < slots; ++i) (void)bucket.add_slot();
  const tequant::delayed_update_args args{tequant::delayed_scaling<>::scaled_max(tequant::fp8_dtype::e5m2, 0)};
  const std::vector<float> src = source_amaxes();
  const std::span<float> staging = bucket.staging();
  c10d::AllreduceOptions opts;
  opts.reduceOp = c10d::ReduceOp::MAX;
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    std::copy(src.begin(), src.end(), staging.begin());
    std::vector<at::Tensor> t{at::from_blob(staging.data(), {static_cast<std::int64_t>(slots)}, at::kFloat)};
    pg.allreduce(t, opts)->wait();
    tequant::delayed_update_bucket_host(bucket.view(), tequant::window_max{}, args);
  }
  state.counters["collectives_per_step"] = 1;
  state.counters["slots"] = slots;
}

/// c10d_comm::all_reduce_max alone (key encode into its int32 buffer + Gloo allreduce + decode).
void bm_c10d_comm_all_reduce_max(benchmark::State& state) {
  tequant::c10d_comm comm(gloo_world());
  const std::vector<float> src = source_amaxes();
  std::vector<float> buf(slots);
  MPI_Barrier(MPI_COMM_WORLD);
  for (auto _ : state) {
    std::copy(src.begin(), src.end(), buf.begin());
    comm.all_reduce_max(buf.data(), slots, 0);
    benchmark::DoNotOptimize(buf.data());
  }
  state.counters["collectives_per_step"] = 1;
  state.counters["slots"] = slots;
}

BENCHMARK(bm_c10d_comm_all_reduce_max)->Iterations(c10d_iterations)->Repetitions(5)->Unit(benchmark::kMicrosecond);
BENCHMARK(bm_c10d_handwritten_update)->ArgName("history")->Arg(1024)->Arg(16)
    ->Iterations(c10d_iterations)->Repetitions(5)->Unit(benchmark::kMicrosecond);
BENCHMARK_TEMPLATE(bm_manager_update, tequant::c10d_comm)
    ->ArgNames({"layout_check", "history"})->Args({0, 1024})->Args({0, 16})
    ->Iterations(c10d_iterations)->Repetitions(5)->Unit(benchmark::kMicrosecond);

/// A Gloo group over the mpirun ranks: rank 0 makes a FileStore directory and tells the others.
/// Returns the directory (rank 0 removes it at the end).
std::string make_gloo_world(int rank, int size) {
  char path[256] = {};
  if (rank == 0) {
    char tmpl[] = "/tmp/tequant-bench-c10d-XXXXXX";
    if (mkdtemp(tmpl) != nullptr) std::snprintf(path, sizeof path, "%s", tmpl);
  }
  MPI_Bcast(path, sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
  auto store = c10::make_intrusive<c10d::FileStore>(std::string(path) + "/store", size);
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(60));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 1;
  gloo_world() = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  gloo_world()->barrier()->wait();
  return path;
}
#endif

class null_reporter : public benchmark::BenchmarkReporter {
 public:
  bool ReportContext(const Context&) override { return true; }
  void ReportRuns(const std::vector<Run>&) override {}
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  // Google Benchmark rejects a file reporter without --benchmark_out, so the other ranks pass one only
  // when rank 0 writes a file too.
  bool file_out = false;
  for (int i = 1; i < argc; ++i) file_out = file_out || std::string_view(argv[i]).starts_with("--benchmark_out=");
  benchmark::Initialize(&argc, argv);
#ifdef TEQUANT_BENCH_C10D
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const std::string store_dir = make_gloo_world(rank, size);
#endif
  if (rank == 0) {
    benchmark::RunSpecifiedBenchmarks();
  } else {
    null_reporter quiet;
    if (file_out)
      benchmark::RunSpecifiedBenchmarks(&quiet, &quiet);  // same collectives, no output (and no JSON file)
    else
      benchmark::RunSpecifiedBenchmarks(&quiet);
  }
  benchmark::Shutdown();
#ifdef TEQUANT_BENCH_C10D
  gloo_world()->barrier()->wait();  // no rank closes its sockets while a peer still reads
  gloo_world().reset();
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    std::error_code ignored;
    std::filesystem::remove_all(store_dir, ignored);
  }
#endif
  MPI_Finalize();
  return 0;
}
