// SPDX-License-Identifier: Apache-2.0
// Helpers for tests that run under mpirun: compare values across ranks bit for bit.
#pragma once
#include <mpi.h>

#include <bit>
#include <cstdint>
#include <span>
#include <vector>

namespace tequant_test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

/// True on every rank iff every rank passed the same number of values with the same bits.
inline bool identical_across_ranks(std::span<const float> v, MPI_Comm comm = MPI_COMM_WORLD) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  unsigned long long n = v.size(), n_max = 0, n_min = 0;
  MPI_Allreduce(&n, &n_max, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
  MPI_Allreduce(&n, &n_min, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
  if (n_max != n_min) return false;
  std::vector<std::uint32_t> mine(v.size()), all(v.size() * static_cast<std::size_t>(size));
  for (std::size_t i = 0; i < v.size(); ++i) mine[i] = std::bit_cast<std::uint32_t>(v[i]);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_UINT32_T, all.data(), static_cast<int>(mine.size()),
                MPI_UINT32_T, comm);
  for (std::size_t i = 0; i < all.size(); ++i)
    if (all[i] != all[i % v.size()]) return false;
  return true;
}

/// Logical AND over the ranks of `comm`.
inline bool all_ranks(bool ok, MPI_Comm comm = MPI_COMM_WORLD) {
  int in = ok ? 1 : 0, out = 0;
  MPI_Allreduce(&in, &out, 1, MPI_INT, MPI_MIN, comm);
  return out == 1;
}

}  // namespace tequant_test
