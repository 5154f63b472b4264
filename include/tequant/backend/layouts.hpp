// SPDX-License-Identifier: Apache-2.0
// Tensor views and TE's scale-tensor shapes (te-semantics §2.3-2.4), shared by every backend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "tequant/error.hpp"

namespace tequant {

/// A row-major matrix: rows = product of the leading dims, cols = the last dim.
template <class T>
struct matrix_view {
  T* data = nullptr;
  std::size_t rows = 0, cols = 0;
  constexpr std::size_t size() const noexcept { return rows * cols; }
};

/// Shape of a scale tensor (row-major), padding included.
struct scale_shape {
  std::size_t rows = 0, cols = 0;
  constexpr std::size_t size() const noexcept { return rows * cols; }
  friend constexpr bool operator==(scale_shape, scale_shape) = default;
};

namespace detail {
constexpr std::size_t ceil_div(std::size_t a, std::size_t b) noexcept { return (a + b - 1) / b; }
constexpr std::size_t round_up(std::size_t a, std::size_t b) noexcept { return ceil_div(a, b) * b; }
}  // namespace detail

/// MXFP8 rowwise E8M0 scales: (roundup(M,128), roundup(K/32,4)); entry (m, k/32).
constexpr scale_shape mxfp8_rowwise_scale_shape(std::size_t M, std::size_t K) noexcept {
  return {detail::round_up(M, 128), detail::round_up(K / 32, 4)};
}
/// MXFP8 columnwise E8M0 scales: (roundup(M/32,4), roundup(K,128)); entry (m/32, k).
constexpr scale_shape mxfp8_columnwise_scale_shape(std::size_t M, std::size_t K) noexcept {
  return {detail::round_up(M / 32, 4), detail::round_up(K, 128)};
}
/// FP8 block 1x128 rowwise fp32 scale_inv, stored M-major: (ceil(K/128), roundup(M,4)); entry (k/128, m).
constexpr scale_shape block_1d_rowwise_scale_shape(std::size_t M, std::size_t K) noexcept {
  return {detail::ceil_div(K, 128), detail::round_up(M, 4)};
}
/// FP8 block 1x128 columnwise (data transposed to [K, M]): (ceil(M/128), roundup(K,4)); entry (m/128, k).
constexpr scale_shape block_1d_columnwise_scale_shape(std::size_t M, std::size_t K) noexcept {
  return {detail::ceil_div(M, 128), detail::round_up(K, 4)};
}
/// FP8 block 128x128 rowwise: (ceil(M/128), roundup(ceil(K/128),4)); entry (m/128, k/128).
constexpr scale_shape block_2d_rowwise_scale_shape(std::size_t M, std::size_t K) noexcept {
  return {detail::ceil_div(M, 128), detail::round_up(detail::ceil_div(K, 128), 4)};
}
/// FP8 block 128x128 columnwise (data transposed): (ceil(K/128), roundup(ceil(M/128),4)); entry (k/128, m/128).
constexpr scale_shape block_2d_columnwise_scale_shape(std::size_t M, std::size_t K) noexcept {
  return {detail::ceil_div(K, 128), detail::round_up(detail::ceil_div(M, 128), 4)};
}
/// The FP8 block scale shape of one direction: 128x128 tiles with `tile_2d`, 1x128 otherwise.
constexpr scale_shape block_scale_shape(std::size_t M, std::size_t K, bool tile_2d, bool columnwise) noexcept {
  if (tile_2d) return columnwise ? block_2d_columnwise_scale_shape(M, K) : block_2d_rowwise_scale_shape(M, K);
  return columnwise ? block_1d_columnwise_scale_shape(M, K) : block_1d_rowwise_scale_shape(M, K);
}

/// NVFP4 rowwise E4M3 block scales: (roundup(M,128), roundup(ceil(K/16),4)); entry (m, k/16).
constexpr scale_shape nvfp4_rowwise_scale_shape(std::size_t M, std::size_t K) noexcept {
  return {detail::round_up(M, 128), detail::round_up(detail::ceil_div(K, 16), 4)};
}
/// NVFP4 columnwise E4M3 block scales (data transposed to [K, M]): (roundup(K,128), roundup(ceil(M/16),4));
/// entry (k, m/16).
constexpr scale_shape nvfp4_columnwise_scale_shape(std::size_t M, std::size_t K) noexcept {
  return {detail::round_up(K, 128), detail::round_up(detail::ceil_div(M, 16), 4)};
}

/// Outputs of an MXFP8 quantization; an empty data span skips that direction. Columnwise data has
/// the input's [M, K] layout (TE: not transposed).
struct mxfp8_output {
  std::span<std::uint8_t> rowwise_data, rowwise_scale, columnwise_data, columnwise_scale;
};

/// Outputs of an FP8 block quantization; an empty data span skips that direction. Columnwise data is
/// the transpose, [K, M] (TE's GEMM-ready layout).
struct block_output {
  std::span<std::uint8_t> rowwise_data;
  std::span<float> rowwise_scale_inv;
  std::span<std::uint8_t> columnwise_data;
  std::span<float> columnwise_scale_inv;
};

/// Outputs of an NVFP4 quantization; an empty data span skips that direction. Data holds two E2M1 codes
/// a byte (element 2i in the low nibble); columnwise data is the transpose, [K, M]. Per direction: the
/// E4M3 block scales and one fp32 global decode scale (1 / S_enc).
struct nvfp4_output {
  std::span<std::uint8_t> rowwise_data, rowwise_scale;
  std::span<float> rowwise_global_scale_inv;
  std::span<std::uint8_t> columnwise_data, columnwise_scale;
  std::span<float> columnwise_global_scale_inv;
};

/// How an NVFP4 cast rounds: to nearest even, or stochastically when `rng_offset` is set (random bits
/// from Philox4x32-10 keyed by (rng_seed, *rng_offset, element index); *rng_offset advances by what
/// the cast consumed). `tile_2d`: one block scale per 16x16 tile shared by both directions (weights).
/// `columnwise_rht`: the columnwise copy is made from TE's 16x16 random Hadamard transform of each
/// column's 16-row groups (rows a multiple of 16; not with tile_2d).
struct nvfp4_options {
  bool tile_2d = false;
  std::uint64_t* rng_offset = nullptr;
  std::uint64_t rng_seed = 0;
  bool columnwise_rht = false;
};

namespace detail {
inline void require_size(const char* op, const char* tensor, std::size_t got, std::size_t want, const char* rule) {
  require(got == want, op, ": ", tensor, " has ", got, " elements, expected ", want, " (", rule, ")");
}
}  // namespace detail

}  // namespace tequant
