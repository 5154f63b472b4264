// SPDX-License-Identifier: Apache-2.0
// Delayed scaling (TE's DelayedScaling): scales come from a window of earlier amaxes.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

#include "tequant/cast_plan.hpp"
#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/persistence/bytes.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/concepts.hpp"
#include "tequant/recipe/delayed_io.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace tequant {

/// Window algorithm "max" (TE default): the amax is the maximum of the window (current included).
struct window_max {
  TEQUANT_HD constexpr float operator()(float /*current*/, float window_max) const noexcept { return window_max; }
};

/// Window algorithm "most_recent": the amax is the current (reduced) staging amax.
struct most_recent {
  static constexpr bool uses_window = false;  // the host update skips the window max
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

namespace detail {

/// Backends that update all buckets of a direction in one pass (cuda_backend: one kernel launch).
// (The view type is spelled with declval: nvcc 13 cannot refer to one requires-parameter in another.)
template <class State, class Algo>
concept batched_delayed_update =
    requires(State& s, std::span<const decltype(std::declval<State&>().view())> views,
             std::span<const delayed_update_args> args, direction d) {
      s.backend().update_delayed(views, args, Algo{}, d);
    };

}  // namespace detail

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

  /// The fields a state file records, in the order version 1 wrote them.
  template <class V>
  static void visit_params(delayed_params& p, V&& v) {
    v("format", p.format);
    v("history_length", p.history_length);
    v("margin", p.margin);
    v("reduce_amax", p.reduce_amax);
  }
  /// Two fixed probes of the window algorithm: window_max and most_recent (and most user functors)
  /// answer them differently, so state written with another Algo is refused.
  template <class V>
  static void visit_identity(V&& v) {
    const Algo algo{};
    float probe[2] = {algo(1.0f, 2.0f), algo(3.0f, 0.5f)};
    v("window_algorithm_probe_0", probe[0]);
    v("window_algorithm_probe_1", probe[1]);
  }

  static constexpr fp8_dtype dtype(const delayed_params& p, direction d) noexcept { return dtype_for(p.format, d); }

  /// fp8_max * 2^-margin, exact (a power-of-two product within the normal range).
  static constexpr float scaled_max(fp8_dtype t, int margin) noexcept {
    return fp8_max(t) * detail::bits_float(static_cast<std::uint32_t>(127 - margin) << 23);
  }

  static constexpr delayed_update_args update_args(const delayed_params& p, direction d) noexcept {
    return {scaled_max(dtype(p, d), p.margin)};
  }

  // ---- the per-bucket state ----------------------------------------------------------------------

  template <class Backend>
  static delayed_bucket<Backend> make_state(const delayed_params& p, const Backend& backend) {
    return delayed_bucket<Backend>(p.history_length, backend);
  }
  template <class Backend>
  static void add_slot(delayed_bucket<Backend>& s) {
    (void)s.add_slot();
  }
  template <class Backend>
  static std::span<float> staging(delayed_bucket<Backend>& s) noexcept {
    return s.staging();
  }
  static constexpr bool reduces_amax(const delayed_params& p) noexcept { return p.reduce_amax; }

  /// plan() reads no state value: cast handles keep it until a registration or state load.
  static constexpr bool stable_plans = true;
  /// The slot's scale, and its staging amax as the amax sink.
  template <class Backend>
  static cast_plan plan(const delayed_params& p, delayed_bucket<Backend>& s, slot_id slot) noexcept {
    return {s.scale_data() + slot.index, s.staging().data() + slot.index, dtype(p, slot.dir)};
  }

  /// TE's fused update on every bucket of the direction: one backend call for all of them where the
  /// backend has a batched update (cuda_backend: one launch), else one per bucket.
  template <class Range>
  static void update(const delayed_params& p, direction d, Range&& buckets) {
    const delayed_update_args args = update_args(p, d);
    using state = std::remove_cvref_t<decltype(*std::begin(buckets))>;
    if constexpr (detail::batched_delayed_update<state, Algo>) {
      using view_type = decltype(std::declval<state&>().view());
      // Fixed room on the stack: no allocation on the update path (it may run inside a graph capture).
      constexpr std::size_t chunk = 32;
      std::array<view_type, chunk> views{};
      std::array<delayed_update_args, chunk> chunk_args{};
      std::size_t k = 0;
      state* launcher = nullptr;
      const auto launch = [&] {
        launcher->backend().update_delayed(std::span<const view_type>(views.data(), k),
                                           std::span<const delayed_update_args>(chunk_args.data(), k), Algo{}, d);
        k = 0;
      };
      for (state& s : buckets) {
        if (k == 0) launcher = &s;
        views[k] = s.view();
        chunk_args[k] = args;
        if (++k == chunk) launch();
      }
      if (k != 0) launch();
    } else {
      for (state& s : buckets) s.update(Algo{}, args);
    }
  }

  template <class Backend>
  static void save_state(const delayed_bucket<Backend>& s, detail::byte_writer& w) {
    detail::save_delayed_bucket(s, w);
  }
  template <class Backend>
  static delayed_bucket<Backend> load_state(detail::byte_reader& r, const delayed_params& p, const Backend& backend) {
    return detail::load_delayed_bucket(r, p.history_length, backend);
  }

  template <class Backend>
  static float scale(const delayed_bucket<Backend>& s, std::uint32_t j) {
    return s.scale(j);
  }
  template <class Backend>
  static float staging_amax(const delayed_bucket<Backend>& s, std::uint32_t j) {
    return s.staging_amax(j);
  }
};

static_assert(scaling_recipe<delayed_scaling<>>);
static_assert(scaling_recipe<delayed_scaling<most_recent>>);

}  // namespace tequant
