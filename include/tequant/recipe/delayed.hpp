// SPDX-License-Identifier: Apache-2.0
// Delayed scaling (TE's DelayedScaling): scales come from a window of earlier amaxes.
#pragma once
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/concepts.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace tequant {

/// Window algorithm "max" (TE default): the amax is the maximum of the window (current included).
struct window_max {
  TEQUANT_HD constexpr float operator()(float /*current*/, float window_max) const noexcept { return window_max; }
};

/// Window algorithm "most_recent": the amax is the current (reduced) staging amax.
struct most_recent {
  TEQUANT_HD constexpr float operator()(float current, float /*window_max*/) const noexcept { return current; }
};

/// Runtime knobs of delayed scaling (TE's DelayedScaling fields).
struct delayed_params {
  fp8_format format = fp8_format::hybrid;  ///< e4m3 or hybrid (e5m2 is rejected)
  std::uint32_t history_length = 1024;     ///< L: window = current amax + L-1 committed ones
  int margin = 0;                          ///< scale = fp8_max * 2^-margin / amax
  bool reduce_amax = true;                 ///< MAX all-reduce staging amaxes over the bucket's group
  friend constexpr bool operator==(const delayed_params&, const delayed_params&) = default;
};

/// Delayed scaling; `Algo` is an empty functor `float(float current, float window_max)` fused into
/// the update pass (window_max, most_recent or a user's).
template <class Algo = window_max>
struct delayed_scaling {
  static_assert(std::is_empty_v<Algo> && std::is_default_constructible_v<Algo>,
                "tequant: Algo (1st argument of delayed_scaling) must be an empty, default-constructible functor");
  static_assert(std::is_nothrow_invocable_r_v<float, const Algo&, float, float>,
                "tequant: Algo (1st argument of delayed_scaling) must be callable as float(float current, float "
                "window_max) const noexcept");

  using policy_kind = recipe_kind;
  using params_type = delayed_params;
  using algo_type = Algo;
  template <class Backend>
  using state_for = delayed_bucket<Backend>;
  static constexpr std::string_view name = "delayed_scaling";
  static constexpr bool is_stateful = true;

  /// Margins beyond this would push fp8_max * 2^-margin out of the normal float range.
  static constexpr int max_abs_margin = 100;

  static void validate(const delayed_params& p) {
    check_training_format(p.format, "delayed_scaling");
    detail::require(p.history_length >= 1 && p.history_length <= delayed_max_history_length,
                    "delayed_scaling: history_length ", p.history_length, " must be in [1, ",
                    delayed_max_history_length, "]");
    detail::require(p.margin >= -max_abs_margin && p.margin <= max_abs_margin, "delayed_scaling: margin ", p.margin,
                    " must be in [", -max_abs_margin, ", ", max_abs_margin, "]");
  }

  static constexpr fp8_dtype dtype(const delayed_params& p, direction d) noexcept { return dtype_for(p.format, d); }

  /// fp8_max * 2^-margin, exact (a power-of-two product within the normal range).
  static constexpr float scaled_max(fp8_dtype t, int margin) noexcept {
    return fp8_max(t) * detail::bits_float(static_cast<std::uint32_t>(127 - margin) << 23);
  }

  static constexpr delayed_update_args update_args(const delayed_params& p, direction d) noexcept {
    return {scaled_max(dtype(p, d), p.margin)};
  }
};

static_assert(scaling_recipe<delayed_scaling<>>);
static_assert(stateful_recipe<delayed_scaling<>>);
static_assert(stateful_recipe<delayed_scaling<most_recent>>);

}  // namespace tequant
