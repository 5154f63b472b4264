// SPDX-License-Identifier: Apache-2.0
// Amax reduction over libtorch c10d process groups (the groups a libtorch trainer already has, e.g.
// ProcessGroupGloo between CPU processes; what TransformerEngine calls amax_reduction_group).
//
// Staging amaxes are host floats (the host backend, libtorch's fp8_linear). They are reduced as
// order-preserving integer keys (comm/max_key.hpp), so that NaN, infinities and -0 come out with the
// same bits on every rank and as mpi_comm gives them: Gloo's MAX on floats is std::max, whose NaN
// result depends on operand order.
//
// Time-outs belong to the process group (ProcessGroupGloo::Options::create(timeout); Gloo's default is
// 30 minutes): a collective that does not complete in time fails there, and c10d_comm reports it as a
// tequant::error. A Gloo context is unusable after a failed collective (its peers may be mid-message),
// so the comm then refuses every later collective until the application rebuilds the process groups
// and the comm.
//
// Ranks that enter one allreduce with different lengths are not an error Gloo can report: its TCP
// pair enforces message lengths in its I/O thread and the process aborts. The layout check
// (comm_options::check_layout) catches that mismatch on every rank before any allreduce.
#pragma once
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tequant/comm/concepts.hpp"
#include "tequant/comm/layout.hpp"
#include "tequant/comm/max_key.hpp"
#include "tequant/error.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// MAX all-reduce of host staging amaxes over c10d process groups: one allreduce per bucket, fmaxf
/// semantics (NaN ignored unless every rank has NaN), identical bits on every rank.
///
/// Group g reduces over groups[g] (group 0 = every data-parallel rank; e.g. group 1 = this rank's
/// tensor-parallel group). Every rank passes the same number of groups. The comm shares ownership of
/// the process groups; tequant's collectives are issued on them in the manager's order, so an
/// application that also uses them from another thread must order its own collectives with the
/// manager's updates (or give tequant process groups of its own, as mpi_comm does with duplicates).
class c10d_comm {
 public:
  using policy_kind = comm_kind;
  using group_ptr = c10::intrusive_ptr<c10d::ProcessGroup>;

  /// One reduction group (group 0).
  explicit c10d_comm(group_ptr group, comm_options options = {})
      : c10d_comm(std::vector<group_ptr>{std::move(group)}, options) {}

  /// Group g reduces over groups[g].
  explicit c10d_comm(std::vector<group_ptr> groups, comm_options options = {})
      : groups_(std::move(groups)), options_(options) {
    detail::require(!groups_.empty(), "c10d_comm: at least one process group (group 0) is needed");
    for (std::size_t g = 0; g < groups_.size(); ++g)
      detail::require(groups_[g].defined(), "c10d_comm: process group of group ", g, " is null");
    rank_ = static_cast<std::uint32_t>(groups_[0]->getRank());
  }

  /// In place, data[0..n) = element-wise max over the ranks of `group`. One allreduce of n int32 keys;
  /// nothing when the group has one rank. On failure data[0..n) is unchanged (the keys live in a
  /// buffer of the comm) and the comm is marked failed.
  void all_reduce_max(float* data, std::size_t n, std::uint32_t group) {
    c10d::ProcessGroup& pg = usable(group, "all_reduce_max");
    if (n == 0 || pg.getSize() == 1) return;
    at::Tensor keys = buffer(keys32_, at::kInt, n);
    auto* k = keys.data_ptr<std::int32_t>();
    for (std::size_t i = 0; i < n; ++i)  // unsigned key order -> signed order: flip the top bit
      k[i] = std::bit_cast<std::int32_t>(detail::float_max_key(std::bit_cast<std::uint32_t>(data[i])) ^ 0x80000000u);
    run_max(pg, keys, group, "all_reduce_max", n, " floats");
    for (std::size_t i = 0; i < n; ++i)
      data[i] = std::bit_cast<float>(detail::float_from_max_key(std::bit_cast<std::uint32_t>(k[i]) ^ 0x80000000u));
  }

  /// In place MAX of host words (the layout check's exchange), as signed 64-bit keys.
  void all_reduce_max_u64(std::uint64_t* data, std::size_t n, std::uint32_t group) {
    c10d::ProcessGroup& pg = usable(group, "layout check");
    if (n == 0 || pg.getSize() == 1) return;
    at::Tensor words = buffer(keys64_, at::kLong, n);
    auto* w = words.data_ptr<std::int64_t>();
    constexpr std::uint64_t top = std::uint64_t{1} << 63;
    for (std::size_t i = 0; i < n; ++i) w[i] = std::bit_cast<std::int64_t>(data[i] ^ top);
    run_max(pg, words, group, "layout check", n, " words");
    for (std::size_t i = 0; i < n; ++i) data[i] = std::bit_cast<std::uint64_t>(w[i]) ^ top;
  }

  /// This process's rank in group 0.
  std::uint32_t rank() const noexcept { return rank_; }
  std::uint32_t size(std::uint32_t group) const {
    return static_cast<std::uint32_t>(checked(group, "size").getSize());
  }
  std::uint32_t groups() const noexcept { return static_cast<std::uint32_t>(groups_.size()); }
  const group_ptr& process_group(std::uint32_t group) const {
    (void)checked(group, "process_group");
    return groups_[group];
  }

  /// True after a collective failed (time-out, lost peer, mismatched sizes): every later one throws.
  bool failed() const noexcept { return !failure_.empty(); }

  bool layout_check_enabled() const noexcept { return options_.check_layout; }
  void set_layout_check(bool on) noexcept { options_.check_layout = on; }

 private:
  c10d::ProcessGroup& checked(std::uint32_t group, std::string_view where) const {
    if (group >= groups_.size()) [[unlikely]]
      detail::fail("c10d_comm::", where, ": reduction group ", group, " does not exist (this communicator has ",
                   groups_.size(), " group", groups_.size() == 1 ? "" : "s", ")");
    return *groups_[group];
  }

  c10d::ProcessGroup& usable(std::uint32_t group, std::string_view where) {
    c10d::ProcessGroup& pg = checked(group, where);
    if (failed()) [[unlikely]]
      detail::fail("c10d_comm::", where, " (rank ", pg.getRank(), " of group ", group,
                   "): the communicator failed earlier and its process groups cannot be reused (", failure_,
                   "); rebuild the process groups and the c10d_comm");
    return pg;
  }

  /// A contiguous view of n elements of a buffer kept across calls (grown, never shrunk).
  static at::Tensor buffer(at::Tensor& keep, at::ScalarType type, std::size_t n) {
    const auto count = static_cast<std::int64_t>(n);
    if (!keep.defined() || keep.numel() < count) keep = at::empty({count}, at::TensorOptions().dtype(type));
    return keep.narrow(0, 0, count);
  }

  void run_max(c10d::ProcessGroup& pg, at::Tensor& t, std::uint32_t group, std::string_view where, std::size_t n,
               std::string_view unit) {
    std::vector<at::Tensor> tensors{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::MAX;
    try {
      pg.allreduce(tensors, opts)->wait();
    } catch (const std::exception& e) {
      std::string what = e.what();
      // c10::Error appends a C++ backtrace after the first line; the first line is the message.
      if (const auto eol = what.find('\n'); eol != std::string::npos) what.resize(eol);
      failure_ = "group " + std::to_string(group) + ": " + what;
      detail::fail("c10d_comm::", where, " (rank ", pg.getRank(), " of group ", group, ", ", pg.getSize(), " ranks, ",
                   pg.getBackendName(), ", ", n, unit, "): allreduce failed: ", what);
    }
  }

  std::vector<group_ptr> groups_;
  at::Tensor keys32_, keys64_;
  std::string failure_;  // empty while the communicator is usable
  std::uint32_t rank_ = 0;
  comm_options options_;
};

static_assert(amax_comm<c10d_comm>);

}  // namespace tequant
