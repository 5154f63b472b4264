// SPDX-License-Identifier: Apache-2.0
// What a module needs to quantize one tensor (the cast plan) and where the cast writes (the quantized
// output). A recipe makes the plan; a backend's quantize(input, plan, output) carries it out; the module
// in between never needs to know which recipe it runs.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "tequant/backend/layouts.hpp"
#include "tequant/format/formats.hpp"

namespace tequant {

/// How a backend scales a tensor: the kernel families (TE's NVTEScalingMode). Recipes choose one per
/// cast; a recipe of a user's picks among these without touching a backend.
enum class scaling_mode : std::uint8_t {
  tensor_scale,    ///< one fp32 scale, read from *plan.scale (delayed scaling, any stateful per-tensor recipe)
  tensor_current,  ///< one fp32 scale from this tensor's own amax (current scaling)
  mxfp8,           ///< E8M0 scale per 1x32 (rowwise) / 32x1 (columnwise) block; per 32x32 tile with tile_2d
  block,           ///< fp32 scale per 1x128 (rowwise) / 128x1 (columnwise) block; per 128x128 tile with tile_2d
  nvfp4,           ///< E2M1 data, E4M3 scale per 1x16 / 16x1 block (16x16 tile with tile_2d), fp32 global scale
};

constexpr const char* to_string(scaling_mode m) noexcept {
  switch (m) {
    case scaling_mode::tensor_scale: return "tensor_scale";
    case scaling_mode::tensor_current: return "tensor_current";
    case scaling_mode::mxfp8: return "mxfp8";
    case scaling_mode::block: return "block";
    case scaling_mode::nvfp4: return "nvfp4";
  }
  return "unknown";
}

/// How to cast one tensor now. The manager's plan_cast(slot) asks the recipe for it and adjusts it for
/// checkpoint replays and autocast regions; modules pass it to backend.quantize() unchanged.
struct cast_plan {
  /// tensor_scale: where the scale lives (backend memory, so a device cast reads it without a sync).
  const float* scale = nullptr;
  /// max |x| (NaN ignored) is max-accumulated here; nullptr records nothing (a replay, a stateless recipe).
  float* amax = nullptr;
  fp8_dtype dtype = fp8_dtype::e4m3;
  scaling_mode mode = scaling_mode::tensor_scale;
  /// False outside an enabled autocast region: the module runs this GEMM in high precision, and
  /// backend.quantize() refuses the plan, so no module can quantize there by mistake.
  bool enabled = true;
  /// mxfp8 / block / nvfp4: one scale per 2D tile shared by both directions (weights).
  bool tile_2d = false;
  /// tensor_current / block: round scales down to a power of two.
  bool power_2_scale = false;
  /// tensor_current / block: amax floor.
  float amax_epsilon = 0.0f;
  /// A cast that rounds stochastically draws its random bits from the counter-based generator keyed
  /// by (rng_seed, *rng_offset, element index) and advances *rng_offset (host memory) by what it
  /// consumed; nullptr: the cast draws nothing. A replay points it at its frame's copy, so replayed
  /// casts reproduce the original forward's bits.
  std::uint64_t* rng_offset = nullptr;
  std::uint64_t rng_seed = 0;
  /// nvfp4: the columnwise copy is TE's 16x16 random Hadamard transform of each column's 16-row groups,
  /// quantized (TE: the wgrad copies of inputs and gradients); dequantizing it undoes the transform.
  bool columnwise_rht = false;
};

/// Sizes of everything one cast of a [rows, cols] tensor with a plan writes, per direction.
struct quantized_layout {
  std::size_t data = 0;         ///< codes (bytes) of one direction (nvfp4: two codes a byte)
  std::size_t scale_inv[2]{};   ///< fp32 scale_inv values, [0] rowwise, [1] columnwise
  std::size_t block_scale[2]{}; ///< one-byte block scales (MXFP8's E8M0, NVFP4's E4M3), [0] rowwise, [1] columnwise
  /// Columnwise data is the transpose, [cols, rows] (FP8 block scaling); otherwise [rows, cols].
  bool columnwise_transposed = false;
  /// Both directions would hold the same values (per-tensor modes): quantize rowwise only and use it twice.
  bool shared_directions = false;
};

/// Where one cast writes, in the backend's memory. A direction is requested by giving its data; its
/// scale spans must then have the sizes layout_of() gives (TE's padded shapes; padding written as 0).
struct quantized_output {
  std::span<std::uint8_t> rowwise_data, columnwise_data;
  /// tensor modes: one value, 1 / scale; block: per block or tile; nvfp4: one value, the global 1 / S_enc.
  std::span<float> rowwise_scale_inv, columnwise_scale_inv;
  /// mxfp8: the E8M0 code per block or tile; nvfp4: the E4M3 code per block.
  std::span<std::uint8_t> rowwise_block_scale, columnwise_block_scale;
};

/// What quantize(x [rows, cols], plan, out) needs in `out` (the checks of each mode still apply: MXFP8
/// needs rows and cols that are multiples of 32, NVFP4 even rows and cols).
constexpr quantized_layout layout_of(const cast_plan& plan, std::size_t rows, std::size_t cols) noexcept {
  quantized_layout l;
  l.data = rows * cols;
  switch (plan.mode) {
    case scaling_mode::tensor_scale:
    case scaling_mode::tensor_current:
      l.scale_inv[0] = l.scale_inv[1] = 1;
      l.shared_directions = true;
      break;
    case scaling_mode::mxfp8:
      l.block_scale[0] = mxfp8_rowwise_scale_shape(rows, cols).size();
      l.block_scale[1] = mxfp8_columnwise_scale_shape(rows, cols).size();
      break;
    case scaling_mode::block:
      l.scale_inv[0] = block_scale_shape(rows, cols, plan.tile_2d, false).size();
      l.scale_inv[1] = block_scale_shape(rows, cols, plan.tile_2d, true).size();
      l.columnwise_transposed = true;
      break;
    case scaling_mode::nvfp4:
      l.data = rows * cols / 2;
      l.scale_inv[0] = l.scale_inv[1] = 1;
      l.block_scale[0] = nvfp4_rowwise_scale_shape(rows, cols).size();
      l.block_scale[1] = nvfp4_columnwise_scale_shape(rows, cols).size();
      l.columnwise_transposed = true;
      break;
  }
  return l;
}

}  // namespace tequant
