// SPDX-License-Identifier: Apache-2.0
// Training formats: which FP8 element type each direction uses.
#pragma once
#include <cstdint>

#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/format/fp8.hpp"

namespace tequant {

/// Forward (input, weight, output) or backward (grad_output, grad_input) quantization.
enum class direction : std::uint8_t { forward, backward };

constexpr const char* to_string(direction d) noexcept { return d == direction::forward ? "forward" : "backward"; }

/// Training format. `hybrid` is E4M3 forward, E5M2 backward. `e5m2` exists only so that it can be
/// named and rejected: E5M2 everywhere loses too much forward precision (TE rejects it too).
enum class fp8_format : std::uint8_t { e4m3, hybrid, e5m2 };

constexpr const char* to_string(fp8_format f) noexcept {
  return f == fp8_format::e4m3 ? "e4m3" : f == fp8_format::hybrid ? "hybrid" : "e5m2";
}

/// Throws for formats that cannot train; recipes call it from their constructors.
inline void check_training_format(fp8_format f, const char* recipe) {
  detail::require(f != fp8_format::e5m2, recipe, ": fp8_format::e5m2 is not a training format "
                  "(use e4m3 or hybrid; E5M2 is only used for gradients, through hybrid)");
}

/// Element type a tensor of direction `d` uses under format `f`.
TEQUANT_HD constexpr fp8_dtype dtype_for(fp8_format f, direction d) noexcept {
  if (f == fp8_format::e4m3) return fp8_dtype::e4m3;
  if (f == fp8_format::e5m2) return fp8_dtype::e5m2;
  return d == direction::forward ? fp8_dtype::e4m3 : fp8_dtype::e5m2;
}

}  // namespace tequant
