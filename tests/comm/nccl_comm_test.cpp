// SPDX-License-Identifier: Apache-2.0
// nccl_comm: built and linked in CI (g++, no nvcc); device cases run when a GPU is present.
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tequant/comm/layout.hpp"
#include "tequant/comm/nccl.hpp"
#include "tequant/error.hpp"

namespace {

bool has_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/// A one-rank NCCL communicator on device 0 and a stream, released at scope exit.
struct one_rank {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  one_rank() {
    int dev = 0;
    REQUIRE(ncclCommInitAll(&comm, 1, &dev) == ncclSuccess);
    REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  }
  ~one_rank() {
    cudaStreamDestroy(stream);
    ncclCommDestroy(comm);
  }
};

}  // namespace

TEST_CASE("nccl host: the library links and reports its version without a GPU") {
  int version = 0;
  REQUIRE(ncclGetVersion(&version) == ncclSuccess);
  // NCCL_VERSION_CODE style (2.28.9 -> 22809). The floor is what nccl.hpp needs (ncclGetLastError,
  // 2.13), not this machine's 2.28: the GPU run may link PyTorch's NCCL wheel, whatever its version.
  CHECK(version >= 21300);
  CHECK(version / 10000 == NCCL_MAJOR);
}

TEST_CASE("nccl host: NCCL and CUDA failures become tequant::error with their strings") {
  const std::string want = std::string("tequant: here: ncclAllReduce failed: ") + ncclGetErrorString(ncclInvalidArgument);
  CHECK_THROWS_WITH_AS(tequant::detail::nccl_check(ncclInvalidArgument, "ncclAllReduce", "here"),
                       doctest::Contains(want.c_str()), tequant::error);
  CHECK_THROWS_WITH_AS(tequant::detail::cuda_runtime_check(cudaErrorInvalidValue, "cudaMemcpyAsync", "there"),
                       doctest::Contains("tequant: there: cudaMemcpyAsync failed: cudaErrorInvalidValue"),
                       tequant::error);
  CHECK_THROWS_WITH_AS(tequant::nccl_comm(ncclComm_t{nullptr}, cudaStream_t{nullptr}),
                       doctest::Contains("communicator of group 0 is null"), tequant::error);
}

TEST_CASE("device: one-rank nccl_comm reduces in place on the stream and checks the layout" *
          doctest::skip(!has_gpu())) {
  one_rank r;
  tequant::nccl_comm comm(r.comm, r.stream);
  CHECK(comm.rank() == 0);
  CHECK(comm.size(0) == 1);
  CHECK(comm.stream() == r.stream);

  const std::vector<float> in{1.0f, 0.0f, 448.0f, std::numeric_limits<float>::infinity(), 3.5e-5f};
  float* dev = nullptr;
  REQUIRE(cudaMalloc(&dev, in.size() * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(dev, in.data(), in.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  comm.all_reduce_max(dev, in.size(), 0);
  std::vector<float> out(in.size());
  REQUIRE(cudaMemcpyAsync(out.data(), dev, in.size() * sizeof(float), cudaMemcpyDeviceToHost, r.stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(r.stream) == cudaSuccess);
  for (std::size_t i = 0; i < in.size(); ++i) CHECK(std::bit_cast<std::uint32_t>(out[i]) == std::bit_cast<std::uint32_t>(in[i]));

  CHECK_THROWS_WITH_AS(comm.all_reduce_max(dev, in.size(), 1), doctest::Contains("reduction group 1 does not exist"),
                       tequant::error);
  cudaFree(dev);

  const std::vector<tequant::bucket_signature> buckets{{"forward, group 0", 6, 11}, {"backward, group 0", 4, 12}};
  CHECK_NOTHROW(tequant::detail::verify_layout(comm, 0, buckets));
  std::uint64_t words[2] = {5, 7};
  comm.all_reduce_max_u64(words, 2, 0);
  CHECK(words[0] == 5);
  CHECK(words[1] == 7);
}
