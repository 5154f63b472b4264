// SPDX-License-Identifier: Apache-2.0
// Helpers for the c10d tests (ranks started by c10d_main.cpp): Gloo process groups over one FileStore,
// and cross-rank checks over a group of their own (so a test's broken group cannot break the checks).
#pragma once
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

namespace tequant_test {

using group_ptr = c10::intrusive_ptr<c10d::ProcessGroup>;

inline int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : std::atoi(v);
}
inline int world_rank() { return env_int("TEQUANT_C10D_RANK"); }
inline int world_size() { return env_int("TEQUANT_C10D_SIZE"); }

inline const c10::intrusive_ptr<c10d::Store>& file_store() {
  static const c10::intrusive_ptr<c10d::Store> store =
      c10::make_intrusive<c10d::FileStore>(std::getenv("TEQUANT_C10D_STORE"), world_size());
  return store;
}

/// A Gloo group named `name` (unique per creation: every rank creates its groups in the same order).
/// Collective over the `size` ranks that pass the same name.
inline group_ptr make_group(const std::string& name, int rank, int size,
                            std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  static int serial = 0;
  auto store = c10::make_intrusive<c10d::PrefixStore>(std::to_string(serial++) + "/" + name, file_store());
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 1;
  group_ptr g = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
  // A peer that returns from the constructor first could otherwise destroy the group (closing its
  // sockets) while this rank is still connecting: Gloo then fails with "Connection closed by peer".
  g->barrier()->wait();
  return g;
}

inline group_ptr make_world_group(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return make_group("world", world_rank(), world_size(), timeout);
}

/// This rank's pair (ranks 2k and 2k+1; a single rank when the world size is odd and it is the last).
inline group_ptr make_pair_group() {
  const int r = world_rank(), first = r / 2 * 2;
  const int size = first + 1 < world_size() ? 2 : 1;
  return make_group("pair" + std::to_string(first), r - first, size);
}

/// The group the checks below run on.
inline c10d::ProcessGroup& checks() {
  static const group_ptr g = make_group("checks", world_rank(), world_size(), std::chrono::seconds(60));
  return *g;
}

inline at::Tensor all_reduce(at::Tensor t, c10d::ReduceOp::RedOpType op, c10d::ProcessGroup& pg = checks()) {
  std::vector<at::Tensor> v{t};
  c10d::AllreduceOptions o;
  o.reduceOp = op;
  pg.allreduce(v, o)->wait();
  return t;
}

/// Logical AND over every rank.
inline bool all_ranks(bool ok) {
  return all_reduce(at::full({1}, ok ? 1 : 0, at::kInt), c10d::ReduceOp::MIN).item<int>() == 1;
}

/// True on every rank of `pg` iff every rank passed the same number of values with the same bits.
inline bool identical_across_ranks(std::span<const float> v, c10d::ProcessGroup& pg = checks()) {
  const auto n = static_cast<std::int64_t>(v.size());
  const auto lo = all_reduce(at::full({1}, n, at::kLong), c10d::ReduceOp::MIN, pg).item<std::int64_t>();
  const auto hi = all_reduce(at::full({1}, n, at::kLong), c10d::ReduceOp::MAX, pg).item<std::int64_t>();
  if (lo != hi) return false;
  if (n == 0) return true;  // Gloo's allgather divides by the element count
  at::Tensor mine = at::empty({n}, at::kInt);
  for (std::int64_t i = 0; i < n; ++i) mine.data_ptr<std::int32_t>()[i] = std::bit_cast<std::int32_t>(v[static_cast<std::size_t>(i)]);
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < pg.getSize(); ++r) out[0].push_back(at::empty({n}, at::kInt));
  std::vector<at::Tensor> in{mine};
  pg.allgather(out, in)->wait();
  for (const auto& t : out[0])
    if (!at::equal(t, mine)) return false;
  return true;
}

inline std::uint32_t bits(float f) { return std::bit_cast<std::uint32_t>(f); }

}  // namespace tequant_test
