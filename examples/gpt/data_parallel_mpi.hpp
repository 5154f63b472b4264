// SPDX-License-Identifier: Apache-2.0
// gpt_mpi's side of data parallelism over MPI (only gpt_mpi includes it: the single-process gpt
// needs no MPI). The trainer's hooks: every rank's losses, the gradient sum, and the manager's comm,
// tequant's mpi_comm, with the layout check on.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include <tequant/comm/mpi.hpp>

#include "trainer.hpp"

namespace gpt {

using mpi_parallel = data_parallel<tequant::mpi_comm>;

inline void mpi_ok(int rc, const char* call) {
  if (rc != MPI_SUCCESS) throw std::runtime_error(std::string(call) + " failed: " + tequant::detail::mpi_error_string(rc));
}

/// How the ranks' gradients are summed.
enum class gradient_sum {
  allreduce,  ///< one MPI_Allreduce(MPI_SUM): the transport's order (2 ranks: the same as one process)
  ordered,    ///< MPI_Allgather, then every rank adds the ranks' gradients in rank order: the additions
              ///< one process makes accumulating N micro-batches, at any N (N times the traffic)
};

/// Data parallelism over `comm` (MPI_COMM_WORLD for the run, MPI_COMM_SELF for a one-rank reference).
inline mpi_parallel over(MPI_Comm comm, gradient_sum sum = gradient_sum::allreduce) {
  mpi_parallel dp;
  MPI_Comm_rank(comm, &dp.rank);
  MPI_Comm_size(comm, &dp.ranks);
  // The layout check costs one small collective per update; it turns a rank whose modules differ
  // into a tequant::error on every rank instead of a hang (Release builds leave it off by default).
  dp.make_comm = [comm] { return tequant::mpi_comm(comm, tequant::comm_options{.check_layout = true}); };
  if (dp.ranks == 1) return dp;
  dp.gather_losses = [comm, n = dp.ranks](const std::vector<float>& mine) {
    std::vector<float> all(mine.size() * std::size_t(n));
    mpi_ok(MPI_Allgather(mine.data(), int(mine.size()), MPI_FLOAT, all.data(), int(mine.size()), MPI_FLOAT, comm),
           "MPI_Allgather (losses)");
    return all;
  };
  // Every gradient, packed in parameter order, summed over the ranks. The sum needs no division:
  // each rank's backward seed already carries 1/ranks (as DDP divides before its all-reduce), so the
  // FP8 gradient casts see the values a one-process run over the global batch sees.
  dp.sum_gradients = [comm, sum, n = dp.ranks](const std::vector<tensor>& params) {
    std::vector<float> g;
    for (const tensor& p : params) {
      if (p->grad.empty()) p->grad = matrix(p->value.rows, p->value.cols);  // every rank sends every slot
      g.insert(g.end(), p->grad.data.begin(), p->grad.data.end());
    }
    const std::size_t size = g.size();
    if (sum == gradient_sum::allreduce) {
      mpi_ok(MPI_Allreduce(MPI_IN_PLACE, g.data(), int(size), MPI_FLOAT, MPI_SUM, comm), "MPI_Allreduce (gradients)");
    } else {
      std::vector<float> all(size * std::size_t(n));
      mpi_ok(MPI_Allgather(g.data(), int(size), MPI_FLOAT, all.data(), int(size), MPI_FLOAT, comm),
             "MPI_Allgather (gradients)");
      for (std::size_t i = 0; i < size; ++i) {
        float s = all[i];
        for (std::size_t r = 1; r < std::size_t(n); ++r) s += all[r * size + i];
        g[i] = s;
      }
    }
    std::size_t at = 0;
    for (const tensor& p : params)
      for (float& x : p->grad.data) x = g[at++];
  };
  return dp;
}

// One translation unit per recipe (train_*_mpi.cpp), as for the single-process runs.
run_result train_delayed_mpi(const options& o, const corpus& data, bool fp8, const mpi_parallel& dp);
run_result train_current_mpi(const options& o, const corpus& data, bool fp8, const mpi_parallel& dp);
run_result train_mxfp8_mpi(const options& o, const corpus& data, bool fp8, const mpi_parallel& dp);
run_result train_block_mpi(const options& o, const corpus& data, bool fp8, const mpi_parallel& dp);
run_result train_nvfp4_mpi(const options& o, const corpus& data, bool fp8, const mpi_parallel& dp);

inline run_result train_mpi(const options& o, const corpus& data, bool fp8, const mpi_parallel& dp) {
  switch (o.rec) {
    case recipe::delayed: return train_delayed_mpi(o, data, fp8, dp);
    case recipe::current: return train_current_mpi(o, data, fp8, dp);
    case recipe::mxfp8: return train_mxfp8_mpi(o, data, fp8, dp);
    case recipe::block: return train_block_mpi(o, data, fp8, dp);
    case recipe::nvfp4: return train_nvfp4_mpi(o, data, fp8, dp);
  }
  return {};
}

}  // namespace gpt
