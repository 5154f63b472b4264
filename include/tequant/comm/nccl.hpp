// SPDX-License-Identifier: Apache-2.0
// Amax reduction over NCCL (staging amaxes in device memory, on the CUDA backend's stream).
//
// A .hpp, not a .cuh: ncclAllReduce and the CUDA runtime calls used here are host APIs, so any C++20
// compiler can build a training loop that uses nccl_comm; only the include paths of nccl.h and
// cuda_runtime_api.h and the libraries (tequant_nccl_lib, CUDA::cudart) are needed. It stays out of
// the generic header-set check of tequant::tequant for that reason and has its own check in tests/comm.
#pragma once
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tequant/comm/concepts.hpp"
#include "tequant/comm/layout.hpp"
#include "tequant/error.hpp"
#include "tequant/policy.hpp"

namespace tequant {

namespace detail {

inline void nccl_check(ncclResult_t r, std::string_view call, std::string_view where, ncclComm_t comm = nullptr) {
  if (r == ncclSuccess) [[likely]]
    return;
  const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  fail(where, ": ", call, " failed: ", ncclGetErrorString(r), (last != nullptr && *last != '\0') ? " (" : "",
       (last != nullptr && *last != '\0') ? last : "", (last != nullptr && *last != '\0') ? ")" : "");
}

inline void cuda_runtime_check(cudaError_t e, std::string_view call, std::string_view where) {
  if (e != cudaSuccess) [[unlikely]] {
    // Clear a non-sticky error, so that the next, unrelated CUDA call does not report it again
    // (as tequant::detail::check does for the CUDA backend).
    (void)cudaGetLastError();
    fail(where, ": ", call, " failed: ", cudaGetErrorName(e), ": ", cudaGetErrorString(e));
  }
}

}  // namespace detail

/// MAX all-reduce of device-resident staging amaxes with ncclAllReduce(ncclMax), in place, enqueued on
/// `stream` with no host synchronisation (so the backward flush stays capturable and asynchronous).
/// ncclMax on floats is fmaxf: NaN is ignored unless every rank has NaN; mpi_comm matches that.
///
/// Does not own the communicators or the stream (NCCL communicators are created by the application,
/// usually one per parallel group); they must outlive the nccl_comm.
class nccl_comm {
 public:
  using policy_kind = comm_kind;

  nccl_comm(ncclComm_t comm, cudaStream_t stream, comm_options options = {})
      : nccl_comm(std::span<const ncclComm_t>(&comm, 1), stream, options) {}

  /// Group g reduces over groups[g]; every rank passes the same number of groups.
  nccl_comm(std::span<const ncclComm_t> groups, cudaStream_t stream, comm_options options = {})
      : comms_(groups.begin(), groups.end()), stream_(stream), options_(options) {
    detail::require(!comms_.empty(), "nccl_comm: at least one communicator (group 0) is needed");
    sizes_.reserve(comms_.size());
    for (std::size_t g = 0; g < comms_.size(); ++g) {
      detail::require(comms_[g] != nullptr, "nccl_comm: communicator of group ", g, " is null");
      int count = 0;
      detail::nccl_check(ncclCommCount(comms_[g], &count), "ncclCommCount", "nccl_comm", comms_[g]);
      sizes_.push_back(static_cast<std::uint32_t>(count));
    }
    int r = 0;
    detail::nccl_check(ncclCommUserRank(comms_[0], &r), "ncclCommUserRank", "nccl_comm", comms_[0]);
    rank_ = static_cast<std::uint32_t>(r);
  }

  /// `data` is device memory. One ncclAllReduce on the stream, also for a one-rank group (a device
  /// copy): the path stays the same whatever the group size, and a one-GPU test exercises it.
  void all_reduce_max(float* data, std::size_t n, std::uint32_t group) {
    const ncclComm_t c = comm(group, "all_reduce_max");
    if (n == 0) return;
    detail::nccl_check(ncclAllReduce(data, data, n, ncclFloat32, ncclMax, c, stream_), "ncclAllReduce",
                       "nccl_comm::all_reduce_max", c);
  }

  /// `data` is HOST memory (the layout check's few words): staged through the device and synchronised,
  /// which is fine for a debug check.
  void all_reduce_max_u64(std::uint64_t* data, std::size_t n, std::uint32_t group) {
    const ncclComm_t c = comm(group, "all_reduce_max_u64");
    if (n == 0) return;
    void* dev = nullptr;
    detail::cuda_runtime_check(cudaMallocAsync(&dev, n * sizeof(std::uint64_t), stream_), "cudaMallocAsync",
                               "nccl_comm layout check");
    struct release {
      void* p;
      cudaStream_t s;
      ~release() { cudaFreeAsync(p, s); }
    } guard{dev, stream_};
    const std::size_t bytes = n * sizeof(std::uint64_t);
    detail::cuda_runtime_check(cudaMemcpyAsync(dev, data, bytes, cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync",
                               "nccl_comm layout check");
    detail::nccl_check(ncclAllReduce(dev, dev, n, ncclUint64, ncclMax, c, stream_), "ncclAllReduce",
                       "nccl_comm layout check", c);
    detail::cuda_runtime_check(cudaMemcpyAsync(data, dev, bytes, cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync",
                               "nccl_comm layout check");
    detail::cuda_runtime_check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize", "nccl_comm layout check");
  }

  std::uint32_t rank() const noexcept { return rank_; }
  std::uint32_t size(std::uint32_t group) const {
    (void)comm(group, "size");
    return sizes_[group];
  }
  std::uint32_t groups() const noexcept { return static_cast<std::uint32_t>(comms_.size()); }
  cudaStream_t stream() const noexcept { return stream_; }

  bool layout_check_enabled() const noexcept { return options_.check_layout; }
  void set_layout_check(bool on) noexcept { options_.check_layout = on; }

 private:
  ncclComm_t comm(std::uint32_t group, std::string_view where) const {
    if (group >= comms_.size()) [[unlikely]]
      detail::fail("nccl_comm::", where, ": reduction group ", group, " does not exist (this communicator has ",
                   comms_.size(), " group", comms_.size() == 1 ? "" : "s", ")");
    return comms_[group];
  }

  std::vector<ncclComm_t> comms_;
  std::vector<std::uint32_t> sizes_;
  cudaStream_t stream_ = nullptr;
  std::uint32_t rank_ = 0;
  comm_options options_;
};

static_assert(amax_comm<nccl_comm>);

}  // namespace tequant
