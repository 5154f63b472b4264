// SPDX-License-Identifier: Apache-2.0
// Data-parallel FP8 delayed scaling over MPI: every rank sees different data, the manager reduces the
// amaxes with one MAX all-reduce per bucket per update, and every rank ends each step with the same
// scales. Run:  mpirun -np 2 ./distributed_mpi
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"
#include "tequant/comm/mpi.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/manager.hpp"
#include "tequant/recipe/delayed.hpp"

using manager = tequant::quantization_manager<tequant::delayed_scaling<>, tequant::explicit_scope,
                                              tequant::stacked_recompute, tequant::mpi_comm>;

namespace {

/// Stand-in for a tensor this rank's micro-batch produces: its values grow with rank and step.
float amax_of_batch(int rank, int step, int layer, int role) {
  std::vector<float> x(256);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = std::sin(static_cast<float>(i + 1) * 0.37f + static_cast<float>(layer + role)) *
           (1.0f + 0.5f * static_cast<float>(rank) + 0.25f * static_cast<float>(step));
  float a = 0.0f;
  for (float v : x) a = std::fmax(a, std::fabs(v));
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, exit_code = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    tequant::delayed_params params;
    params.history_length = 16;
    manager m(params);  // mpi_comm over MPI_COMM_WORLD
    std::vector<tequant::module_handle> layers;
    for (int l = 0; l < 4; ++l) layers.push_back(m.register_module("layer" + std::to_string(l)));

    for (int step = 0; step < 5; ++step) {
      {
        auto region = m.autocast();  // forward; its exit runs the forward update (one all-reduce)
        for (int l = 0; l < 4; ++l) {
          (void)m.module_forward(layers[l]);
          for (int r = 0; r < 3; ++r) {
            const auto plan = m.plan_cast(m.slot(layers[l], static_cast<tequant::forward_role>(r)));
            m.backend().max_accumulate(plan.amax, amax_of_batch(rank, step, l, r));  // the cast records |x|max
          }
        }
      }
      {
        auto scope = m.backward_scope();  // one logical backward; its exit flushes (one all-reduce)
        for (int l = 3; l >= 0; --l) {
          if (rank == 1 && l == 0) continue;  // this rank's batch does not reach layer0: no hang anyway
          for (int r = 0; r < 2; ++r) {
            const auto plan = m.plan_cast(m.slot(layers[l], static_cast<tequant::backward_role>(r)));
            m.backend().max_accumulate(plan.amax, 0.01f * amax_of_batch(rank, step, l, r + 3));
          }
          m.request_backward_update();
        }
      }
    }

    // Gather every scale from every rank and compare bit for bit.
    std::vector<float> mine;
    for (auto h : layers) {
      for (int r = 0; r < 3; ++r) mine.push_back(m.scale(m.slot(h, static_cast<tequant::forward_role>(r))));
      for (int r = 0; r < 2; ++r) mine.push_back(m.scale(m.slot(h, static_cast<tequant::backward_role>(r))));
    }
    std::vector<float> all(mine.size() * static_cast<std::size_t>(size));
    MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_FLOAT, all.data(), static_cast<int>(mine.size()),
                  MPI_FLOAT, MPI_COMM_WORLD);
    const bool agree = std::memcmp(all.data(), all.data() + mine.size() * static_cast<std::size_t>(size - 1),
                                   mine.size() * sizeof(float)) == 0 &&
                       std::memcmp(all.data(), mine.data(), mine.size() * sizeof(float)) == 0;
    int ok = agree ? 1 : 0, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    const auto st = m.stats();
    if (rank == 0) {
      std::printf("5 steps: %llu forward + %llu backward updates, %llu all-reduces on each rank\n",
                  static_cast<unsigned long long>(st.forward_updates), static_cast<unsigned long long>(st.backward_updates),
                  static_cast<unsigned long long>(st.collectives));
      std::printf("layer0 input scale %.6g, grad_output scale %.6g\n",
                  static_cast<double>(m.scale(m.slot(layers[0], tequant::forward_role::input))),
                  static_cast<double>(m.scale(m.slot(layers[0], tequant::backward_role::grad_output))));
      std::printf(all_ok ? "all %d ranks agree on every scale\n" : "ranks DISAGREE (%d ranks)\n", size);
    }
    exit_code = all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    exit_code = 1;
  }
  MPI_Finalize();
  return exit_code;
}
