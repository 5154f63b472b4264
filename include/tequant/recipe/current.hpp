// SPDX-License-Identifier: Apache-2.0
// Current scaling (TE's Float8CurrentScaling): one fp32 scale per tensor from its own amax.
#pragma once
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

/// Runtime knobs of current scaling (TE's QParams).
struct current_params {
  fp8_format format = fp8_format::hybrid;  ///< e4m3 or hybrid
  bool power_2_scale = false;              ///< round the scale down to a power of two
  float amax_epsilon = 0.0f;               ///< amax floor
  friend constexpr bool operator==(const current_params&, const current_params&) = default;
};

/// Current scaling: amax of the tensor, then scale_from_amax(amax, fp8_max, pow2, eps, FLT_MAX), then cast.
struct current_scaling {
  using policy_kind = recipe_kind;
  using params_type = current_params;
  static constexpr std::string_view name = "current_scaling";

  static void validate(const current_params& p) {
    check_training_format(p.format, "current_scaling");
    detail::require(p.amax_epsilon >= 0.0f && detail::is_finite(p.amax_epsilon), "current_scaling: amax_epsilon ",
                    p.amax_epsilon, " must be finite and >= 0");
  }

  template <class V>
  static void visit_params(current_params& p, V&& v) {
    v("format", p.format);
    v("power_2_scale", p.power_2_scale);
    v("amax_epsilon", p.amax_epsilon);
  }

  static constexpr fp8_dtype dtype(const current_params& p, direction d) noexcept { return dtype_for(p.format, d); }

  /// Every cast computes its scale from its own amax; nothing is recorded.
  static constexpr cast_plan plan(const current_params& p, slot_id s) noexcept {
    cast_plan c{nullptr, nullptr, dtype(p, s.dir), scaling_mode::tensor_current};
    c.power_2_scale = p.power_2_scale;
    c.amax_epsilon = p.amax_epsilon;
    return c;
  }

  /// TE's compute_scale_from_amax with value_for_inf = FLT_MAX.
  TEQUANT_HD static constexpr float scale(float amax, fp8_dtype t, bool power_2_scale, float amax_epsilon) noexcept {
    return scale_from_amax(amax, fp8_max(t), power_2_scale, amax_epsilon, detail::float_max);
  }
};

static_assert(stateless_recipe<current_scaling>);

}  // namespace tequant
