// SPDX-License-Identifier: Apache-2.0
// mpi_comm on its own, under mpirun -np 2 and -np 4.
#include <doctest/doctest.h>
#include <mpi.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "tequant/comm/layout.hpp"
#include "tequant/comm/mpi.hpp"
#include "tequant/error.hpp"

using tequant_test::all_ranks;
using tequant_test::identical_across_ranks;
using tequant_test::world_rank;
using tequant_test::world_size;

namespace {

/// Rank r's amax of slot i: different on every rank, so the max comes from different ranks per slot.
float amax_of(int r, std::size_t i) { return static_cast<float>(((r + 1) * 37 + static_cast<int>(i) * 11) % 97) * 0.25f; }

std::uint32_t bits(float x) { return std::bit_cast<std::uint32_t>(x); }

}  // namespace

TEST_CASE("mpi_comm: rank, size and groups") {
  tequant::mpi_comm comm;
  CHECK(comm.rank() == static_cast<std::uint32_t>(world_rank()));
  CHECK(comm.size(0) == static_cast<std::uint32_t>(world_size()));
  CHECK(comm.groups() == 1);
  CHECK_THROWS_WITH_AS(comm.size(1), doctest::Contains("tequant: mpi_comm::size: reduction group 1 does not exist"),
                       tequant::error);
  float x = 1.0f;
  CHECK_THROWS_WITH_AS(comm.all_reduce_max(&x, 1, 3), doctest::Contains("reduction group 3 does not exist"),
                       tequant::error);
  CHECK(x == 1.0f);
}

TEST_CASE("mpi_comm: all_reduce_max gives every rank the element-wise max, bit-identical") {
  tequant::mpi_comm comm;
  const int p = world_size();
  for (std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = amax_of(world_rank(), i);
    comm.all_reduce_max(v.data(), n, 0);
    bool ok = true;
    for (std::size_t i = 0; i < n; ++i) {
      float want = 0.0f;
      for (int r = 0; r < p; ++r) want = std::fmax(want, amax_of(r, i));
      ok = ok && bits(v[i]) == bits(want);
    }
    CHECK(ok);
    CHECK(identical_across_ranks(v));
  }
}

TEST_CASE("mpi_comm: NaN is ignored like NCCL's fmaxf; all-NaN gives the canonical quiet NaN; +0 beats -0") {
  tequant::mpi_comm comm;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int r = world_rank();
  const bool last = r == world_size() - 1;
  // slot 0: NaN on rank 0 only; slot 1: NaN everywhere; slot 2: NaN except on the last rank;
  // slot 3: -0 on rank 0, +0 elsewhere; slot 4: inf on the last rank; slot 5: -NaN on rank 0
  std::vector<float> v{r == 0 ? nan : 2.0f + static_cast<float>(r), nan, last ? 5.0f : nan, r == 0 ? -0.0f : 0.0f,
                       last ? inf : 1.0f, r == 0 ? -nan : 0.5f};
  comm.all_reduce_max(v.data(), v.size(), 0);
  CHECK(bits(v[0]) == bits(1.0f + static_cast<float>(world_size())));
  CHECK(bits(v[1]) == 0x7FC00000u);
  CHECK(bits(v[2]) == bits(5.0f));
  CHECK(bits(v[3]) == bits(0.0f));
  CHECK(bits(v[4]) == bits(inf));
  CHECK(bits(v[5]) == bits(0.5f));
  CHECK(identical_across_ranks(v));
}

TEST_CASE("mpi_comm: several groups reduce over their own communicators") {
  const int r = world_rank();
  MPI_Comm pairs = MPI_COMM_NULL;  // group 1: ranks {0,1}, {2,3}, ...
  MPI_Comm_split(MPI_COMM_WORLD, r / 2, r, &pairs);
  {
    const MPI_Comm groups[] = {MPI_COMM_WORLD, pairs};
    tequant::mpi_comm comm(groups);
    CHECK(comm.groups() == 2);
    CHECK(comm.size(1) == static_cast<std::uint32_t>(std::min(2, world_size() - (r / 2) * 2)));
    float world_max = static_cast<float>(r), pair_max = static_cast<float>(r);
    comm.all_reduce_max(&world_max, 1, 0);
    comm.all_reduce_max(&pair_max, 1, 1);
    CHECK(world_max == static_cast<float>(world_size() - 1));
    CHECK(pair_max == static_cast<float>(std::min(world_size() - 1, (r / 2) * 2 + 1)));
  }
  MPI_Comm_free(&pairs);
}

TEST_CASE("mpi_comm: MPI failures become tequant::error with MPI's error string") {
  CHECK_THROWS_WITH_AS(tequant::detail::mpi_check(MPI_ERR_COUNT, "MPI_Allreduce", "somewhere"),
                       doctest::Contains("tequant: somewhere: MPI_Allreduce failed: MPI_ERR_COUNT"), tequant::error);
  CHECK_NOTHROW(tequant::detail::mpi_check(MPI_SUCCESS, "MPI_Allreduce", "somewhere"));
  CHECK_THROWS_WITH_AS(tequant::mpi_comm(MPI_COMM_NULL), doctest::Contains("group 0 is MPI_COMM_NULL"),
                       tequant::error);
}

TEST_CASE("mpi_comm: the communicator is duplicated, moves transfer it") {
  tequant::mpi_comm a;
  int cmp = 0;
  MPI_Comm_compare(a.communicator(0), MPI_COMM_WORLD, &cmp);
  CHECK(cmp == MPI_CONGRUENT);
  tequant::mpi_comm b(std::move(a));
  CHECK(b.size(0) == static_cast<std::uint32_t>(world_size()));
  float x = static_cast<float>(world_rank());
  b.all_reduce_max(&x, 1, 0);
  CHECK(x == static_cast<float>(world_size() - 1));
}

namespace {

/// Runs the layout check and returns the error message ("" if none); also bounds its time.
std::string layout_error(tequant::mpi_comm& comm, const std::vector<tequant::bucket_signature>& buckets,
                         std::vector<std::uint64_t> extra = {}) {
  const auto t0 = std::chrono::steady_clock::now();
  std::string msg;
  try {
    tequant::detail::verify_layout(comm, 0, buckets, extra);
  } catch (const tequant::error& e) {
    msg = e.what();
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  return msg;
}

}  // namespace

TEST_CASE("layout check: equal layouts pass; any difference fails on EVERY rank, naming the bucket") {
  tequant::mpi_comm comm;
  const bool odd = world_rank() % 2 == 1;
  const bool last = world_rank() == world_size() - 1;
  using sig = tequant::bucket_signature;

  CHECK(all_ranks(layout_error(comm, {{"forward, group 0", 6, 11}, {"backward, group 0", 4, 12}}).empty()));
  CHECK(all_ranks(layout_error(comm, {}).empty()));

  SUBCASE("a rank with an extra slot") {
    const std::string e = layout_error(comm, {{"forward, group 0", last ? 7u : 6u, 11}, {"backward, group 0", 4, 12}});
    CHECK(all_ranks(e.find("tequant: layout check (reduction group 0") == 0));
    CHECK(all_ranks(e.find("bucket 'forward, group 0' (#0) has " + std::string(last ? "7" : "6") +
                           " slots on this rank, but slot counts across the group range over [6, 7]") !=
                    std::string::npos));
  }
  SUBCASE("a rank with an extra bucket") {
    std::vector<sig> b{{"forward, group 0", 6, 11}};
    if (odd) b.push_back({"backward, group 0", 4, 12});
    const std::string e = layout_error(comm, b);
    CHECK(all_ranks(e.find("(#1) has") != std::string::npos));
    CHECK(all_ranks(e.find(odd ? "bucket 'backward, group 0' (#1) has 4 slots" : "bucket #1 (#1) has no such bucket") !=
                    std::string::npos));
    CHECK(all_ranks(e.find("range over [4, none]") != std::string::npos));
  }
  SUBCASE("same sizes, different slots") {
    const std::string e = layout_error(comm, {{"forward, group 0", 6, last ? 99u : 11u}});
    CHECK(all_ranks(e.find("has 6 slots on every rank, but the slots differ") != std::string::npos));
  }
  SUBCASE("different number of groups") {
    const std::string e = layout_error(comm, {{"forward, group 0", 6, 11}}, {last ? 2u : 1u});
    CHECK(all_ranks(e.find("setting #0 is") != std::string::npos));
  }
}
