// SPDX-License-Identifier: Apache-2.0
// The swizzled shared tile of the columnwise block kernel: every (column, row) has its own byte, the
// 16-byte read-back returns the rows in order, and a warp's byte stores hit distinct banks. The host
// cases check the index functions themselves (they are __host__ __device__); the device case runs the
// kernel's own write/read pattern in shared memory.
#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "cuda/device.cuh"
#include "tequant/backend/cuda/block_kernels.cuh"
#include "tequant/backend/cuda/check.cuh"

namespace {

using tequant::detail::load_transposed_chunk;
using tequant::detail::transposed_offset;

constexpr std::uint8_t value_at(int col, int row) { return static_cast<std::uint8_t>(col * 131 + row * 7 + 1); }

template <int E, int H>
void check_mapping() {
  constexpr int W = 32 * E;
  alignas(16) static std::array<std::uint8_t, W * H> tile;
  std::vector<int> hits(W * H, 0);
  for (int col = 0; col < W; ++col)
    for (int row = 0; row < H; ++row) {
      const int o = transposed_offset<E, H>(col, row);
      REQUIRE(o >= 0);
      REQUIRE(o < W * H);
      ++hits[static_cast<std::size_t>(o)];
      tile[static_cast<std::size_t>(o)] = value_at(col, row);
    }
  int collisions = 0;
  for (int h : hits) collisions += h != 1;
  CHECK(collisions == 0);

  int wrong = 0;
  for (int col = 0; col < W; ++col)
    for (int chunk = 0; chunk < H / 16; ++chunk) {
      const uint4 q = load_transposed_chunk<E, H>(tile.data(), col, chunk);
      std::uint8_t b[16];
      std::memcpy(b, &q, 16);
      for (int i = 0; i < 16; ++i) wrong += b[i] != value_at(col, chunk * 16 + i);
    }
  CHECK(wrong == 0);

  // One warp store: 32 lanes write row `row` of columns lane*E + e. Distinct words in one bank serialise.
  std::size_t worst = 0;
  for (int row = 0; row < H; ++row)
    for (int e = 0; e < E; ++e) {
      std::array<std::set<int>, 32> bank_words;
      for (int lane = 0; lane < 32; ++lane) {
        const int word = transposed_offset<E, H>(lane * E + e, row) / 4;
        bank_words[static_cast<std::size_t>(word % 32)].insert(word);
      }
      for (const auto& s : bank_words) worst = std::max(worst, s.size());
    }
  INFO("E = ", E, ", H = ", H);
  CHECK(worst <= (H >= 128 ? 1u : 128u / H));  // H = 128: conflict-free; shorter columns span fewer banks
}

// The block kernel's pattern for one tile: 8 warps, thread (warp, lane) writes rows warp + 8k of
// columns lane*E + e, then every thread reads 16-byte chunks back.
template <int E, int H>
__global__ void tile_roundtrip_kernel(std::uint8_t* out) {
  constexpr int W = 32 * E, K = H / 8;
  __shared__ alignas(16) std::uint8_t tile[W * H];
  const int lane = static_cast<int>(threadIdx.x & 31), warp = static_cast<int>(threadIdx.x >> 5);
  for (int k = 0; k < K; ++k)
    for (int e = 0; e < E; ++e)
      tile[transposed_offset<E, H>(lane * E + e, warp + 8 * k)] = value_at(lane * E + e, warp + 8 * k);
  __syncthreads();
  for (int i = static_cast<int>(threadIdx.x); i < W * H / 16; i += static_cast<int>(blockDim.x)) {
    const int col = i / (H / 16), chunk = i % (H / 16);
    *reinterpret_cast<uint4*>(out + col * H + chunk * 16) = load_transposed_chunk<E, H>(tile, col, chunk);
  }
}

template <int E, int H>
void check_on_device() {
  constexpr int W = 32 * E;
  std::uint8_t* d = nullptr;
  tequant::detail::check(cudaMalloc(&d, W * H), "cudaMalloc");
  tile_roundtrip_kernel<E, H><<<1, 256>>>(d);
  tequant::detail::check(cudaGetLastError(), "tile_roundtrip_kernel launch");
  std::vector<std::uint8_t> got(W * H);
  tequant::detail::check(cudaMemcpy(got.data(), d, got.size(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  tequant::detail::check(cudaFree(d), "cudaFree");
  int wrong = 0;
  for (int col = 0; col < W; ++col)
    for (int row = 0; row < H; ++row) wrong += got[static_cast<std::size_t>(col * H + row)] != value_at(col, row);
  INFO("E = ", E, ", H = ", H);
  CHECK(wrong == 0);
}

}  // namespace

TEST_CASE("nvcc host: the swizzled transposed tile is a bijection and reads back in order") {
  check_mapping<4, 128>();  // fp32, 128-row block tiles
  check_mapping<8, 128>();  // bf16 / fp16
  check_mapping<4, 32>();
  check_mapping<8, 32>();
}

TEST_CASE("device: the block kernel's tile pattern round-trips through shared memory" *
          doctest::skip(cuda_test::no_device())) {
  check_on_device<4, 128>();
  check_on_device<8, 128>();
  check_on_device<8, 32>();
}
