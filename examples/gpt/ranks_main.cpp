// SPDX-License-Identifier: Apache-2.0
// gpt_mpi: the GPT example trained data-parallel over MPI.
//
//   mpirun -n N gpt_mpi [gpt's options] [--compare] [--ordered-sum] [--debug-diverge [STEP]]
//
// Every rank draws the same global batches of --batch sequences and trains on its contiguous share;
// the gradients are summed with MPI_Allreduce, and tequant's mpi_comm reduces the amaxes inside the
// manager's own updates. After every step rank 0 gathers checksums of every rank's scaling state and
// weights: the report (and ranks.csv) says whether all ranks held bit-identical state at every step.
// --compare trains the same model in one process over the same global batches (on rank 0) and prints
// the largest relative loss difference.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>  // usleep

#include "../engine/gemm.hpp"
#include "data_parallel_mpi.hpp"
#include "report.hpp"
#include "options.hpp"

namespace {

using namespace gpt;

constexpr const char* usage_extra =
    "\ngpt_mpi runs under mpirun -n N; --batch is the global batch (a multiple of N), each rank trains on\n"
    "its contiguous batch/N sequences of every micro-batch. Its own options:\n"
    "  --compare        also train in one process over the same global batches (on rank 0) and print the\n"
    "                   largest relative loss difference\n"
    "  --ordered-sum    sum the gradients in rank order (MPI_Allgather, then the same additions as one process\n"
    "                   accumulating N micro-batches) instead of one MPI_Allreduce\n"
    "  --debug-diverge [STEP]  rank 1 registers one module the other ranks do not have at STEP (default 3):\n"
    "                   the manager's layout check stops every rank with a tequant: error\n";

struct rank_options {
  bool compare = false;
  int diverge_step = 0;
  gradient_sum sum = gradient_sum::allreduce;
};

/// Takes gpt_mpi's own flags out of argv; the rest is gpt's command line.
std::vector<char*> own_flags(int argc, char** argv, rank_options& r) {
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--compare") {
      r.compare = true;
    } else if (a == "--ordered-sum") {
      r.sum = gradient_sum::ordered;
    } else if (a == "--debug-diverge") {
      r.diverge_step = 3;
      if (i + 1 < argc && argv[i + 1][0] != '-') {
        char* end = nullptr;
        const long s = std::strtol(argv[i + 1], &end, 10);
        if (*end != '\0' || s < 1 || s > 1000000)
          throw bad_option("--debug-diverge needs a step >= 1, got '" + std::string(argv[i + 1]) + "'");
        r.diverge_step = int(s);
        ++i;
      }
    } else {
      rest.push_back(argv[i]);
    }
  }
  return rest;
}

/// Waits for every rank without spinning a core (OpenMPI's blocking collectives busy-poll, which on
/// a small machine steals the CPU that rank 0's reference run needs).
void wait_for_all_ranks() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  for (int done = 0;;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    usleep(20000);
  }
}

int rank = 0, ranks = 1;
int failing_step = 0;  // the step in progress (what a failure reports); 0 outside training

int run(int argc, char** argv) {
  options o;
  rank_options ro;
  o.tty = false;  // mpirun hands ranks a pseudo-terminal even when its own output is a file: one line per 10%
  try {
    std::vector<char*> rest = own_flags(argc, argv, ro);
    if (!parse(int(rest.size()), rest.data(), o)) {
      if (rank == 0) std::printf("%s%s", usage, usage_extra);
      return 0;
    }
    if (o.batch % ranks != 0)
      throw bad_option("--batch " + std::to_string(o.batch) + " is the global batch: it must be a multiple of the " +
                       std::to_string(ranks) + " ranks (each rank trains on batch/ranks sequences of it)");
    if (ro.diverge_step > 0 && (ranks < 2 || o.rec != recipe::delayed))
      throw bad_option("--debug-diverge needs at least 2 ranks and --recipe delayed (the only recipe here whose "
                       "updates reduce amaxes across ranks)");
    if (ro.diverge_step > o.steps) throw bad_option("--debug-diverge step is after the last step");
  } catch (const bad_option& e) {
    if (rank == 0) std::fprintf(stderr, "gpt_mpi: %s\n\n%s%s", e.what(), usage, usage_extra);
    return 2;
  }
  if (rank != 0) o.quiet = true;

  const corpus data(o.data);
  const int per_rank = o.batch / ranks;
  if (rank == 0) {
    std::printf("tequant GPT on %d rank%s (MPI data parallel): recipe=%s boundary=%s recompute=%s steps=%d\n", ranks,
                ranks == 1 ? "" : "s", name(o.rec), name(o.bnd), name(o.rc), o.steps);
    std::printf("model: %d layers, d_model %d, %d heads, context %d, vocab %zu; global batch %d = %d rank%s x %d "
                "sequences, %d micro-batch%s = %d tokens/step\n",
                o.layers, o.d_model, o.heads, o.context, data.vocab(), o.batch, ranks, ranks == 1 ? "" : "s", per_rank,
                o.micro_batches, o.micro_batches == 1 ? "" : "es", o.batch * o.micro_batches * o.context);
    std::printf("GEMMs: %s; gradients: %s; amaxes: tequant::mpi_comm with the layout check%s\n",
                mini::gemm_backend_name(), ro.sum == gradient_sum::ordered ? "MPI_Allgather, summed in rank order" : "MPI_Allreduce",
                ro.diverge_step > 0 ? "; --debug-diverge: rank 1 registers an extra module" : "");
    std::fflush(stdout);
  }

  // One data-parallel run: the trainer with MPI hooks, plus the per-step checksum gather.
  double sum_seconds = 0.0;  // rank 0, FP8 run: in the gradient sum, waiting for the slowest rank included
  auto distributed = [&](bool fp8, rank_checks& c) {
    mpi_parallel dp = over(MPI_COMM_WORLD, ro.sum);
    if (dp.sum_gradients && fp8)
      dp.sum_gradients = [sum = dp.sum_gradients, &sum_seconds](const std::vector<tensor>& params) {
        const auto t0 = std::chrono::steady_clock::now();
        sum(params);
        sum_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
    if (rank == 1) dp.extra_module_at_step = ro.diverge_step;
    failing_step = 1;
    dp.after_step = [&c](int step, std::uint64_t state, std::uint64_t weights) {
      const std::uint64_t mine[2] = {state, weights};
      std::vector<std::uint64_t> all(2 * std::size_t(ranks));
      mpi_ok(MPI_Gather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, 0, MPI_COMM_WORLD), "MPI_Gather (checksums)");
      failing_step = step + 1;
      if (rank != 0) return;
      bool s = true, w = true;
      for (int r = 1; r < ranks; ++r) {
        s = s && all[2 * std::size_t(r)] == state;
        w = w && all[2 * std::size_t(r) + 1] == weights;
      }
      c.state.push_back(state);
      c.weights.push_back(weights);
      c.state_same.push_back(s);
      c.weights_same.push_back(w);
    };
    run_result r = train_mpi(o, data, fp8, dp);
    failing_step = 0;
    return r;
  };
  rank_checks c32, c8;
  run_result fp32;
  if (!o.fp8_only) fp32 = distributed(false, c32);
  const run_result fp8 = distributed(true, c8);

  // Exactly once, on every rank: steps without one forward and one backward update, summed over ranks.
  int wrong = 0, wrong_all = 0;
  for (int k = 0; k < o.steps; ++k) wrong += fp8.forward_updates[k] != 1 || fp8.backward_updates[k] != 1;
  mpi_ok(MPI_Reduce(&wrong, &wrong_all, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce (updates)");

  double diff8 = NAN, diff32 = NAN;
  if (rank == 0) {
    print_ranks_summary(fp8, c8, o.fp8_only ? nullptr : &c32, o.steps, name(o.rec), wrong_all, sum_seconds);
    const int state_ok = c8.identical(c8.state_same), weights_ok = c8.identical(c8.weights_same);

    if (ro.compare) {
      // The same global batches in one process: over MPI_COMM_SELF, so every all-reduce is a no-op.
      options one = o;
      one.quiet = true;
      one.sample_chars = 0;
      std::printf("\ncomparing with 1 process over the same global batches of %d ...\n", o.batch);
      std::fflush(stdout);
      const run_result ref8 = train_mpi(one, data, true, over(MPI_COMM_SELF));
      const auto [d8, at8] = max_relative_difference(fp8.train_loss, ref8.train_loss);
      const auto [v8, vat8] = max_relative_difference(fp8.val_loss, ref8.val_loss);
      diff8 = std::max(d8, v8);
      std::printf("%-44s train %.3g (step %d), validation %.3g; loss.csv %s\n", "FP8: max relative loss difference",
                  d8, at8, v8, fp8.train_loss == ref8.train_loss && fp8.val_loss == ref8.val_loss ? "identical" : "differs");
      if (!o.fp8_only) {
        const run_result ref32 = train_mpi(one, data, false, over(MPI_COMM_SELF));
        const auto [d32, at32] = max_relative_difference(fp32.train_loss, ref32.train_loss);
        const auto [v32, vat32] = max_relative_difference(fp32.val_loss, ref32.val_loss);
        diff32 = std::max(d32, v32);
        std::printf("%-44s train %.3g (step %d), validation %.3g\n", "FP32: max relative loss difference", d32, at32, v32);
      }
      std::printf("%-44s %.1fs, %.0f tokens/s\n", "1-process FP8 run", ref8.seconds, ref8.tokens_per_second);
    }

    std::filesystem::create_directories(o.out);
    const std::string dir = std::filesystem::absolute(o.out).lexically_normal().string();
    write_loss_csv(dir + "/loss.csv", o.fp8_only ? nullptr : &fp32, fp8);
    write_ranks_csv(dir + "/ranks.csv", fp8, c8, fp8.stateful);
    std::printf("\nwrote %s/loss.csv and ranks.csv\n", dir.c_str());
    char cmp[128] = "n/a";
    if (ro.compare)
      std::snprintf(cmp, sizeof cmp, "%.3g within_1e-4=%s within_1e-3=%s within_1e-2=%s fp32_max_rel_diff=%.3g",
                    diff8, diff8 <= 1e-4 ? "yes" : "no", diff8 <= 1e-3 ? "yes" : "no", diff8 <= 1e-2 ? "yes" : "no",
                    diff32);
    std::printf("summary: ranks=%d recipe=%s boundary=%s state_identical=%s weights_identical=%s updates_1_1=%s "
                "fp8_max_rel_diff=%s\n",
                ranks, name(o.rec), name(o.bnd),
                !fp8.stateful ? "n/a" : state_ok == o.steps ? "yes" : "no", weights_ok == o.steps ? "yes" : "no",
                !fp8.stateful ? "n/a" : wrong_all == 0 ? "yes" : "no", cmp);
    std::fflush(stdout);
  }
  wait_for_all_ranks();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    // Every rank gets a layout-check error; any other failure may hit one rank only, and its peers
    // would wait in the next collective: abort the whole job instead.
    if (failing_step > 0)
      std::fprintf(stderr, "\ngpt_mpi: rank %d, step %d: error: %s\n", rank, failing_step, e.what());
    else
      std::fprintf(stderr, "\ngpt_mpi: rank %d: error: %s\n", rank, e.what());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return rc;
}
