// SPDX-License-Identifier: Apache-2.0
// Amax reduction over MPI (CPU training, or any host-resident staging buffer).
//
// Each reduction group is an MPI communicator (group 0 = the default one; e.g. group 1 = the
// tensor-parallel communicator for activations). mpi_comm duplicates every communicator it is given:
// tequant's collectives then never match a user's messages, and the duplicate can return errors
// (MPI_ERRORS_RETURN) instead of aborting, which the manager needs to keep an update pending.
// Constructing and destroying an mpi_comm are therefore collective over every group's communicator.
#pragma once
#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>
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

namespace detail {

inline std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error code " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

/// Turns an MPI return code into a `tequant::error` naming the call and the place.
inline void mpi_check(int code, std::string_view call, std::string_view where) {
  if (code != MPI_SUCCESS) [[unlikely]]
    fail(where, ": ", call, " failed: ", mpi_error_string(code));
}

}  // namespace detail

/// MAX all-reduce of staging amaxes over MPI. NaN is ignored as by NCCL's ncclMax (fmaxf): see
/// comm/max_key.hpp for why MPI_FLOAT's MPI_MAX is not used directly.
class mpi_comm {
 public:
  using policy_kind = comm_kind;

  /// Group 0 over MPI_COMM_WORLD (not explicit: the manager's `Comm comm = {}` default argument).
  mpi_comm() : mpi_comm(MPI_COMM_WORLD) {}

  /// One reduction group (group 0) over `comm`. Collective over `comm`.
  explicit mpi_comm(MPI_Comm comm, comm_options options = {})
      : mpi_comm(std::span<const MPI_Comm>(&comm, 1), options) {}

  /// Group g reduces over groups[g] (each rank passes its own communicator for each group, e.g. from
  /// MPI_Comm_split). Every rank must pass the same number of groups. Collective over each of them.
  explicit mpi_comm(std::span<const MPI_Comm> groups, comm_options options = {}) : options_(options) {
    int initialized = 0;
    MPI_Initialized(&initialized);
    detail::require(initialized != 0, "mpi_comm: MPI is not initialized (call MPI_Init before constructing mpi_comm)");
    detail::require(!groups.empty(), "mpi_comm: at least one communicator (group 0) is needed");
    comms_.reserve(groups.size());
    try {
      for (std::size_t g = 0; g < groups.size(); ++g) {
        detail::require(groups[g] != MPI_COMM_NULL, "mpi_comm: communicator of group ", g, " is MPI_COMM_NULL");
        MPI_Comm dup = MPI_COMM_NULL;
        detail::mpi_check(MPI_Comm_dup(groups[g], &dup), "MPI_Comm_dup", "mpi_comm");
        comms_.push_back(dup);
        detail::mpi_check(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", "mpi_comm");
      }
      int r = 0;
      detail::mpi_check(MPI_Comm_rank(comms_[0], &r), "MPI_Comm_rank", "mpi_comm");
      rank_ = static_cast<std::uint32_t>(r);
      sizes_.reserve(comms_.size());
      for (MPI_Comm c : comms_) {
        int s = 0;
        detail::mpi_check(MPI_Comm_size(c, &s), "MPI_Comm_size", "mpi_comm");
        sizes_.push_back(static_cast<std::uint32_t>(s));
      }
    } catch (...) {
      release();
      throw;
    }
  }

  mpi_comm(const mpi_comm&) = delete;
  mpi_comm& operator=(const mpi_comm&) = delete;
  mpi_comm(mpi_comm&& o) noexcept
      : comms_(std::exchange(o.comms_, {})), sizes_(std::exchange(o.sizes_, {})), rank_(o.rank_), options_(o.options_) {}
  mpi_comm& operator=(mpi_comm&& o) noexcept {
    if (this != &o) {
      release();
      comms_ = std::exchange(o.comms_, {});
      sizes_ = std::exchange(o.sizes_, {});
      rank_ = o.rank_;
      options_ = o.options_;
    }
    return *this;
  }
  ~mpi_comm() { release(); }

  /// In place, data[0..n) = element-wise max over the ranks of `group` (fmaxf semantics, identical bits
  /// on every rank). One MPI_Allreduce; nothing when the group has one rank.
  void all_reduce_max(float* data, std::size_t n, std::uint32_t group) {
    const MPI_Comm c = comm(group, "all_reduce_max");
    if (n == 0 || sizes_[group] == 1) return;
    detail::require(n <= static_cast<std::size_t>(INT_MAX), "mpi_comm::all_reduce_max: ", n,
                    " floats exceed MPI's int count");
    detail::encode_max_keys(data, n);
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_UINT32_T, MPI_MAX, c);
    detail::decode_max_keys(data, n);  // also on failure: the buffer holds floats again whatever happened
    if (rc != MPI_SUCCESS) [[unlikely]]
      detail::fail("mpi_comm::all_reduce_max (group ", group, ", ", n, " floats): MPI_Allreduce failed: ",
                   detail::mpi_error_string(rc));
  }

  /// In place MAX of host words (the layout check's exchange).
  void all_reduce_max_u64(std::uint64_t* data, std::size_t n, std::uint32_t group) {
    const MPI_Comm c = comm(group, "all_reduce_max_u64");
    if (n == 0 || sizes_[group] == 1) return;
    detail::require(n <= static_cast<std::size_t>(INT_MAX), "mpi_comm::all_reduce_max_u64: count too large");
    detail::mpi_check(MPI_Allreduce(MPI_IN_PLACE, data, static_cast<int>(n), MPI_UINT64_T, MPI_MAX, c),
                      "MPI_Allreduce", "mpi_comm layout check");
  }

  std::uint32_t rank() const noexcept { return rank_; }
  std::uint32_t size(std::uint32_t group) const {
    (void)comm(group, "size");
    return sizes_[group];
  }
  std::uint32_t groups() const noexcept { return static_cast<std::uint32_t>(comms_.size()); }

  /// The (duplicated) communicator of `group`, e.g. for tests that gather state.
  MPI_Comm communicator(std::uint32_t group) const { return comm(group, "communicator"); }

  bool layout_check_enabled() const noexcept { return options_.check_layout; }
  void set_layout_check(bool on) noexcept { options_.check_layout = on; }

 private:
  MPI_Comm comm(std::uint32_t group, std::string_view where) const {
    if (group >= comms_.size()) [[unlikely]]
      detail::fail("mpi_comm::", where, ": reduction group ", group, " does not exist (this communicator has ",
                   comms_.size(), " group", comms_.size() == 1 ? "" : "s", ")");
    return comms_[group];
  }

  void release() noexcept {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized)  // after MPI_Finalize the handles are gone with MPI itself
      for (MPI_Comm& c : comms_)
        if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
    comms_.clear();
    sizes_.clear();
  }

  std::vector<MPI_Comm> comms_;
  std::vector<std::uint32_t> sizes_;
  std::uint32_t rank_ = 0;
  comm_options options_;
};

static_assert(amax_comm<mpi_comm>);

}  // namespace tequant
