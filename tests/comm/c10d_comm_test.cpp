// SPDX-License-Identifier: Apache-2.0
// c10d_comm on its own, over Gloo process groups between 2 and 4 local processes (c10d_main.cpp).
// The header comes first: this TU is its compile-on-its-own check.
#include "tequant/integration/c10d_comm.hpp"

#include <doctest/doctest.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "c10d_test_util.hpp"
#include "tequant/comm/layout.hpp"
#include "tequant/error.hpp"

using tequant_test::all_ranks;
using tequant_test::bits;
using tequant_test::identical_across_ranks;
using tequant_test::make_group;
using tequant_test::make_pair_group;
using tequant_test::make_world_group;
using tequant_test::world_rank;
using tequant_test::world_size;

namespace {

/// Rank r's amax of slot i: different on every rank, so the max comes from different ranks per slot.
float amax_of(int r, std::size_t i) { return static_cast<float>(((r + 1) * 37 + static_cast<int>(i) * 11) % 97) * 0.25f; }

template <class F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("c10d_comm: rank, size, groups; a missing group or a null process group is a tequant::error") {
  tequant::c10d_comm comm(make_world_group());
  CHECK(comm.rank() == static_cast<std::uint32_t>(world_rank()));
  CHECK(comm.size(0) == static_cast<std::uint32_t>(world_size()));
  CHECK(comm.groups() == 1);
  CHECK_FALSE(comm.failed());
  CHECK_THROWS_WITH_AS(comm.size(1), doctest::Contains("tequant: c10d_comm::size: reduction group 1 does not exist"),
                       tequant::error);
  float x = 1.0f;
  CHECK_THROWS_WITH_AS(comm.all_reduce_max(&x, 1, 3), doctest::Contains("reduction group 3 does not exist"),
                       tequant::error);
  CHECK(x == 1.0f);
  CHECK_FALSE(comm.failed());  // a bad argument is not a failed collective
  CHECK_THROWS_WITH_AS(tequant::c10d_comm(tequant::c10d_comm::group_ptr()),
                       doctest::Contains("tequant: c10d_comm: process group of group 0 is null"), tequant::error);
  CHECK_THROWS_WITH_AS(tequant::c10d_comm(std::vector<tequant::c10d_comm::group_ptr>{}),
                       doctest::Contains("at least one process group"), tequant::error);
}

TEST_CASE("c10d_comm: all_reduce_max gives every rank the element-wise max, bit-identical; empty buckets") {
  tequant::c10d_comm comm(make_world_group());
  const int p = world_size();
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{3000}, std::size_t{5}}) {
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
  comm.all_reduce_max(nullptr, 0, 0);  // an empty bucket exchanges nothing (the peers do not enter either)
  CHECK_FALSE(comm.failed());
}

TEST_CASE("c10d_comm: NaN is ignored like NCCL's fmaxf (mpi_comm's bits); all-NaN = canonical NaN; +0 beats -0") {
  tequant::c10d_comm comm(make_world_group());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const int r = world_rank();
  const bool last = r == world_size() - 1;
  // slot 0: NaN on rank 0 only; 1: NaN everywhere; 2: NaN except on the last rank; 3: -0 on rank 0, +0
  // elsewhere; 4: inf on the last rank; 5: -NaN on rank 0; 6: -0 everywhere; 7: -inf and -1;
  // 8: a signalling NaN payload on the last rank, -inf elsewhere
  std::vector<float> v{r == 0 ? nan : 2.0f + static_cast<float>(r),
                       nan,
                       last ? 5.0f : nan,
                       r == 0 ? -0.0f : 0.0f,
                       last ? inf : 1.0f,
                       r == 0 ? -nan : 0.5f,
                       -0.0f,
                       last ? -1.0f : -inf,
                       last ? std::bit_cast<float>(0x7F800001u) : -inf};
  comm.all_reduce_max(v.data(), v.size(), 0);
  CHECK(bits(v[0]) == bits(1.0f + static_cast<float>(world_size())));
  CHECK(bits(v[1]) == 0x7FC00000u);
  CHECK(bits(v[2]) == bits(5.0f));
  CHECK(bits(v[3]) == bits(0.0f));
  CHECK(bits(v[4]) == bits(inf));
  CHECK(bits(v[5]) == bits(0.5f));
  CHECK(bits(v[6]) == bits(-0.0f));
  CHECK(bits(v[7]) == bits(-1.0f));
  CHECK(bits(v[8]) == bits(-inf));
  CHECK(identical_across_ranks(v));
}

TEST_CASE("c10d_comm: several groups reduce over their own process groups; a one-rank group is the identity") {
  const int r = world_rank();
  auto world = make_world_group();
  auto pair = make_pair_group();
  auto self = make_group("self" + std::to_string(r), 0, 1);
  tequant::c10d_comm comm({world, pair, self});
  CHECK(comm.groups() == 3);
  CHECK(comm.size(1) == static_cast<std::uint32_t>(std::min(2, world_size() - (r / 2) * 2)));
  CHECK(comm.size(2) == 1u);
  CHECK(comm.process_group(1).get() == pair.get());
  float world_max = static_cast<float>(r), pair_max = static_cast<float>(r), self_max = static_cast<float>(r);
  comm.all_reduce_max(&pair_max, 1, 1);
  comm.all_reduce_max(&self_max, 1, 2);
  comm.all_reduce_max(&world_max, 1, 0);
  CHECK(world_max == static_cast<float>(world_size() - 1));
  CHECK(pair_max == static_cast<float>(std::min(world_size() - 1, (r / 2) * 2 + 1)));
  CHECK(self_max == static_cast<float>(r));
}

TEST_CASE("c10d_comm: the layout check's exchange (64-bit MAX) and its verdict on every rank") {
  tequant::c10d_comm comm(make_world_group());
  const bool last = world_rank() == world_size() - 1;
  std::vector<std::uint64_t> w{static_cast<std::uint64_t>(world_rank()), ~std::uint64_t{0} - (last ? 0u : 5u), 0, 1ull << 63};
  comm.all_reduce_max_u64(w.data(), w.size(), 0);
  CHECK(w[0] == static_cast<std::uint64_t>(world_size() - 1));
  CHECK(w[1] == ~std::uint64_t{0});  // unsigned order, although the transport compares signed words
  CHECK(w[2] == 0u);
  CHECK(w[3] == 1ull << 63);

  std::string msg;
  try {
    tequant::detail::verify_layout(comm, 0, std::vector<tequant::bucket_signature>{{"forward, group 0", last ? 7u : 6u, 11}});
  } catch (const tequant::error& e) {
    msg = e.what();
  }
  CHECK(all_ranks(msg.find("tequant: layout check (reduction group 0, rank " + std::to_string(world_rank())) == 0));
  CHECK(all_ranks(msg.find("range over [6, 7]") != std::string::npos));
  CHECK_FALSE(comm.failed());  // a layout verdict is not a transport failure: the comm stays usable
}

TEST_CASE("c10d_comm: a rank that never enters the collective: the others fail within the group's time-out") {
  const bool last = world_rank() == world_size() - 1;
  tequant::c10d_comm comm(make_world_group(std::chrono::seconds(3)));
  std::string msg;
  float x = 3.0f;
  const double s = seconds_of([&] {
    if (last) return;  // this rank "died" before the update
    try {
      comm.all_reduce_max(&x, 1, 0);
    } catch (const tequant::error& e) {
      msg = e.what();
    }
  });
  if (!last) {
    CHECK(s < 8.0);
    CHECK(msg.find("tequant: c10d_comm::all_reduce_max (rank " + std::to_string(world_rank()) + " of group 0, " +
                   std::to_string(world_size()) + " ranks, gloo, 1 floats): allreduce failed: ") == 0);
    CHECK(x == 3.0f);  // the staging amax is untouched: the manager's update stays pending
    CHECK(comm.failed());
    // Gloo's context cannot be reused: the comm refuses instead of entering a broken collective.
    CHECK_THROWS_WITH_AS(comm.all_reduce_max(&x, 1, 0), doctest::Contains("the communicator failed earlier"),
                         tequant::error);
    CHECK_THROWS_WITH_AS(comm.all_reduce_max(&x, 0, 0), doctest::Contains("rebuild the process groups"), tequant::error);
  }
  CHECK(all_ranks(true));  // every rank is here again (the checks use their own group)
}

// Ranks entering one allreduce with different sizes are not tested here: Gloo's TCP pair enforces the
// message length in its I/O thread, and the process aborts (std::terminate). The layout check catches
// that mismatch before any allreduce (c10d_manager_test.cpp).

TEST_CASE("c10d_comm over a TCPStore rendezvous (torchrun-style, as docs/distributed.md shows)") {
  // Rank 0 hosts the store on a free port and publishes it through the test's FileStore.
  const int r = world_rank(), p = world_size();
  c10d::TCPStoreOptions so;
  so.port = 0;
  so.isServer = r == 0;
  so.numWorkers = static_cast<std::size_t>(p);
  so.timeout = std::chrono::seconds(20);
  c10::intrusive_ptr<c10d::TCPStore> store;
  static int round = 0;
  const std::string key = "tcp_port" + std::to_string(round++);
  if (r == 0) {
    so.waitWorkers = false;  // the others learn the port only after the server exists
    store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
    const std::string port = std::to_string(store->getPort());
    tequant_test::file_store()->set(key, std::vector<std::uint8_t>(port.begin(), port.end()));
  } else {
    const auto port = tequant_test::file_store()->get(key);
    so.port = static_cast<std::uint16_t>(std::stoi(std::string(port.begin(), port.end())));
    store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
  }
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(10));
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  auto pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, r, p, options);
  pg->barrier()->wait();
  tequant::c10d_comm comm(pg);
  std::vector<float> v{static_cast<float>(r), -static_cast<float>(r)};
  comm.all_reduce_max(v.data(), v.size(), 0);
  CHECK(v[0] == static_cast<float>(p - 1));
  CHECK(bits(v[1]) == bits(-0.0f));  // max(-0, -1, ...) is rank 0's -0
  pg->barrier()->wait();            // the server (rank 0) outlives every client's last request
}
