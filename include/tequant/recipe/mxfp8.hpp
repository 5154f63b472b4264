// SPDX-License-Identifier: Apache-2.0
// MXFP8 (TE's MXFP8BlockScaling): E8M0 scale per 1x32 / 32x1 block, optionally 32x32 for weights.
#pragma once
#include <cstddef>
#include <string_view>

#include "tequant/cast_plan.hpp"
#include "tequant/error.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/concepts.hpp"

namespace tequant {

/// Runtime knobs of MXFP8.
struct mxfp8_params {
  fp8_format format = fp8_format::e4m3;  ///< e4m3 or hybrid
  bool weight_2d = false;                ///< one scale per 32x32 tile for forward weights
  friend constexpr bool operator==(const mxfp8_params&, const mxfp8_params&) = default;
};

/// MXFP8 block scaling. Shapes: rows (product of leading dims) and cols (last dim) multiples of 32.
struct mxfp8_scaling {
  using policy_kind = recipe_kind;
  using params_type = mxfp8_params;
  static constexpr std::string_view name = "mxfp8_scaling";
  static constexpr std::size_t block = 32;

  static void validate(const mxfp8_params& p) { check_training_format(p.format, "mxfp8_scaling"); }
  template <class V>
  static void visit_params(mxfp8_params& p, V&& v) {
    v("format", p.format);
    v("weight_2d", p.weight_2d);
  }
  static constexpr fp8_dtype dtype(const mxfp8_params& p, direction d) noexcept { return dtype_for(p.format, d); }

  /// 1x32 / 32x1 blocks; forward weights in 32x32 tiles when weight_2d.
  static constexpr cast_plan plan(const mxfp8_params& p, slot_id s) noexcept {
    cast_plan c{nullptr, nullptr, dtype(p, s.dir), scaling_mode::mxfp8};
    c.tile_2d = p.weight_2d && role_of(s) == tensor_role::weight;
    return c;
  }
};

static_assert(stateless_recipe<mxfp8_scaling>);

}  // namespace tequant
