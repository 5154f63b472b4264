// SPDX-License-Identifier: Apache-2.0
// doctest under mpirun: every rank runs every test case in the same order (their collectives must
// match); the process exit code is the failure count summed over ranks, so all ranks agree.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>

#include <cstdio>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  doctest::Context context(argc, argv);
  if (rank != 0) context.setOption("no-intro", true);
  int failures = context.run();
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0 && total != 0) std::fprintf(stderr, "tequant MPI tests: %d failure(s) summed over ranks\n", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
