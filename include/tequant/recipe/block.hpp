// SPDX-License-Identifier: Apache-2.0
// FP8 block scaling (TE's Float8BlockScaling, "DeepSeek-style"): fp32 scale per 1x128 or 128x128 tile.
#pragma once
#include <cstddef>
#include <string_view>

#include "tequant/cast_plan.hpp"
#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/scale.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/concepts.hpp"

namespace tequant {

/// Runtime knobs of FP8 block scaling.
struct block_params {
  fp8_format format = fp8_format::e4m3;  ///< e4m3 or hybrid
  bool power_2_scale = true;             ///< TE default (use_f32_scales = false)
  float amax_epsilon = 0.0f;
  friend constexpr bool operator==(const block_params&, const block_params&) = default;
};

/// FP8 block scaling: 1x128 tiles for activations and gradients, 128x128 tiles for weights.
struct block_scaling {
  using policy_kind = recipe_kind;
  using params_type = block_params;
  static constexpr std::string_view name = "block_scaling";
  static constexpr std::size_t block = 128;

  static void validate(const block_params& p) {
    check_training_format(p.format, "block_scaling");
    detail::require(p.amax_epsilon >= 0.0f && detail::is_finite(p.amax_epsilon), "block_scaling: amax_epsilon ",
                    p.amax_epsilon, " must be finite and >= 0");
  }
  template <class V>
  static void visit_params(block_params& p, V&& v) {
    v("format", p.format);
    v("power_2_scale", p.power_2_scale);
    v("amax_epsilon", p.amax_epsilon);
  }

  static constexpr fp8_dtype dtype(const block_params& p, direction d) noexcept { return dtype_for(p.format, d); }

  /// 1x128 blocks for activations and gradients, 128x128 tiles for weights (TE).
  static constexpr cast_plan plan(const block_params& p, slot_id s) noexcept {
    cast_plan c{nullptr, nullptr, dtype(p, s.dir), scaling_mode::block};
    c.tile_2d = role_of(s) == tensor_role::weight;
    c.power_2_scale = p.power_2_scale;
    c.amax_epsilon = p.amax_epsilon;
    return c;
  }

  /// TE's compute_scale_from_types: value_for_inf = the input type's largest finite value.
  TEQUANT_HD static constexpr float scale(float tile_amax, fp8_dtype t, bool power_2_scale, float amax_epsilon,
                                          float input_type_max) noexcept {
    return scale_from_amax(tile_amax, fp8_max(t), power_2_scale, amax_epsilon, input_type_max);
  }
};

static_assert(stateless_recipe<block_scaling>);

}  // namespace tequant
