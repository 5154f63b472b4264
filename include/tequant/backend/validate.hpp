// SPDX-License-Identifier: Apache-2.0
// Argument checks of the MXFP8 and FP8 block entry points, shared by every backend so that host and
// device raise the same tequant::error with the same message for the same misuse.
#pragma once
#include <cstddef>

#include "tequant/backend/layouts.hpp"
#include "tequant/error.hpp"
#include "tequant/format/hadamard.hpp"

namespace tequant::detail {

/// What a checked quantize call has to produce. `empty`: the input has no elements, so every output is
/// empty too and nothing is written (an expert without tokens).
struct quantize_request {
  bool empty = false, row = false, col = false;
  scale_shape rs, cs;  // rowwise / columnwise scale shapes, padding included
};

/// The directions requested by `o` (an mxfp8_output or a block_output); an empty input needs nothing
/// more, any other needs a direction and data.
template <class Output>
quantize_request begin_quantize_request(const char* what, std::size_t elements, const void* x, const Output& o) {
  quantize_request r;
  r.row = !o.rowwise_data.empty();
  r.col = !o.columnwise_data.empty();
  r.empty = elements == 0;
  if (r.empty) return r;
  require(r.row || r.col, what, ": neither rowwise_data nor columnwise_data requested");
  require(x != nullptr, what, ": input data is null");
  return r;
}

/// MXFP8 quantize of x [M, K]: M and K multiples of 32, a direction requested, sizes of TE's padded shapes.
inline quantize_request check_quantize_mxfp8(std::size_t M, std::size_t K, const void* x, const mxfp8_output& o) {
  require(M % 32 == 0, "quantize_mxfp8: input has ", M,
          " rows; MXFP8 needs the product of the leading dims to be a multiple of 32");
  require(K % 32 == 0, "quantize_mxfp8: input has ", K, " columns; MXFP8 needs the last dim to be a multiple of 32");
  quantize_request r = begin_quantize_request("quantize_mxfp8", M * K, x, o);
  if (r.empty) return r;
  r.rs = mxfp8_rowwise_scale_shape(M, K);
  r.cs = mxfp8_columnwise_scale_shape(M, K);
  if (r.row) {
    require_size("quantize_mxfp8", "rowwise_data", o.rowwise_data.size(), M * K, "M*K");
    require_size("quantize_mxfp8", "rowwise_scale", o.rowwise_scale.size(), r.rs.size(), "(roundup(M,128), roundup(K/32,4))");
  }
  if (r.col) {
    require_size("quantize_mxfp8", "columnwise_data", o.columnwise_data.size(), M * K, "M*K");
    require_size("quantize_mxfp8", "columnwise_scale", o.columnwise_scale.size(), r.cs.size(),
                 "(roundup(M/32,4), roundup(K,128))");
  }
  return r;
}

/// FP8 block quantize of x [M, K] (1x128 or, with `tile_2d`, 128x128): a direction requested, sizes of
/// TE's block scale shapes (columnwise data is the transpose, [K, M]).
inline quantize_request check_quantize_block(std::size_t M, std::size_t K, const void* x, bool tile_2d,
                                             const block_output& o) {
  quantize_request r = begin_quantize_request("quantize_block", M * K, x, o);
  if (r.empty) return r;
  r.rs = block_scale_shape(M, K, tile_2d, false);
  r.cs = block_scale_shape(M, K, tile_2d, true);
  if (r.row) {
    require_size("quantize_block", "rowwise_data", o.rowwise_data.size(), M * K, "M*K");
    require_size("quantize_block", "rowwise_scale_inv", o.rowwise_scale_inv.size(), r.rs.size(),
                 tile_2d ? "(ceil(M/128), roundup(ceil(K/128),4))" : "(ceil(K/128), roundup(M,4))");
  }
  if (r.col) {
    require_size("quantize_block", "columnwise_data", o.columnwise_data.size(), M * K, "K*M (transposed)");
    require_size("quantize_block", "columnwise_scale_inv", o.columnwise_scale_inv.size(), r.cs.size(),
                 tile_2d ? "(ceil(K/128), roundup(ceil(M/128),4))" : "(ceil(M/128), roundup(K,4))");
  }
  return r;
}

/// NVFP4 quantize of x [M, K]: M and K even (two codes a byte in either direction), a direction
/// requested, TE's padded scale shapes, one global scale per direction.
inline quantize_request check_quantize_nvfp4(std::size_t M, std::size_t K, const void* x, const nvfp4_output& o) {
  quantize_request r = begin_quantize_request("quantize_nvfp4", M * K, x, o);
  if (r.empty) return r;
  require(M % 2 == 0 && K % 2 == 0, "quantize_nvfp4: input is ", M, " x ", K,
          "; NVFP4 packs two codes a byte in both directions, so rows and cols must be even");
  r.rs = nvfp4_rowwise_scale_shape(M, K);
  r.cs = nvfp4_columnwise_scale_shape(M, K);
  if (r.row) {
    require_size("quantize_nvfp4", "rowwise_data", o.rowwise_data.size(), M * K / 2, "M*K/2");
    require_size("quantize_nvfp4", "rowwise_scale", o.rowwise_scale.size(), r.rs.size(),
                 "(roundup(M,128), roundup(ceil(K/16),4))");
    require_size("quantize_nvfp4", "rowwise_global_scale_inv", o.rowwise_global_scale_inv.size(), 1, "one value per tensor");
  }
  if (r.col) {
    require_size("quantize_nvfp4", "columnwise_data", o.columnwise_data.size(), M * K / 2, "K*M/2 (transposed)");
    require_size("quantize_nvfp4", "columnwise_scale", o.columnwise_scale.size(), r.cs.size(),
                 "(roundup(K,128), roundup(ceil(M/16),4))");
    require_size("quantize_nvfp4", "columnwise_global_scale_inv", o.columnwise_global_scale_inv.size(), 1,
                 "one value per tensor");
  }
  return r;
}

/// NVFP4 dequantize of [M, K] (columnwise data [K, M]): returns the block scale tensor's shape.
inline scale_shape check_dequantize_nvfp4(std::size_t data, std::size_t M, std::size_t K, bool columnwise,
                                          std::size_t scale, std::size_t global, std::size_t out) {
  require(M % 2 == 0 && K % 2 == 0, "dequantize_nvfp4: ", M, " x ", K, " is not an NVFP4 shape (rows and cols even)");
  const scale_shape ss = columnwise ? nvfp4_columnwise_scale_shape(M, K) : nvfp4_rowwise_scale_shape(M, K);
  require_size("dequantize_nvfp4", "data", data, M * K / 2, "M*K/2");
  require_size("dequantize_nvfp4", "scale", scale, ss.size(), "TE's padded NVFP4 scale shape");
  require_size("dequantize_nvfp4", "global_scale_inv", global, 1, "one value per tensor");
  require_size("dequantize_nvfp4", "out", out, M * K, "M*K");
  return ss;
}

/// MXFP8 dequantize of [M, K]: returns the scale shape the scale tensor has.
inline scale_shape check_dequantize_mxfp8(std::size_t data, std::size_t M, std::size_t K, bool columnwise,
                                          std::size_t scale, std::size_t out) {
  const scale_shape ss = columnwise ? mxfp8_columnwise_scale_shape(M, K) : mxfp8_rowwise_scale_shape(M, K);
  require_size("dequantize_mxfp8", "data", data, M * K, "M*K");
  require_size("dequantize_mxfp8", "scale", scale, ss.size(), "TE's padded MXFP8 scale shape");
  require_size("dequantize_mxfp8", "out", out, M * K, "M*K");
  return ss;
}

/// FP8 block dequantize of [M, K] (columnwise data [K, M]): returns the scale_inv tensor's shape.
inline scale_shape check_dequantize_block(std::size_t data, std::size_t M, std::size_t K, bool tile_2d, bool columnwise,
                                          std::size_t scale_inv, std::size_t out) {
  const scale_shape ss = block_scale_shape(M, K, tile_2d, columnwise);
  require_size("dequantize_block", "data", data, M * K, "M*K");
  require_size("dequantize_block", "scale_inv", scale_inv, ss.size(), "TE's block scale shape");
  require_size("dequantize_block", "out", out, M * K, "M*K");
  return ss;
}

/// Checks a transformed columnwise copy can be made or read: rows in whole 16-element groups, and no
/// 2D tiles (TE transforms only the 1D-scaled inputs and gradients).
inline void check_nvfp4_rht(const char* op, std::size_t M, bool tile_2d) {
  require(M % hadamard_size == 0, op, ": the random Hadamard transform of the columnwise copy works on 16-row ",
          "groups, so rows must be a multiple of 16 (got ", M, "); set nvfp4_params::random_hadamard_transform = false ",
          "for this shape");
  require(!tile_2d, op, ": the random Hadamard transform is for 1D-scaled tensors (TE applies it to inputs and ",
          "gradients, never to 2D-tiled weights); the plan has both tile_2d and columnwise_rht");
}

}  // namespace tequant::detail
