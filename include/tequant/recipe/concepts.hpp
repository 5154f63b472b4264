// SPDX-License-Identifier: Apache-2.0
// What a scaling recipe is: a part that owns everything recipe-specific (params and their
// serialisation, per-slot state, the cast plan, the reduction, the update).
#pragma once
#include <concepts>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

#include "tequant/cast_plan.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/persistence/bytes.hpp"
#include "tequant/policy.hpp"

namespace tequant {

namespace detail {

/// Stands for the visitors persistence passes to visit_params: it accepts every field type a state
/// file can hold.
struct param_visitor_archetype {
  void operator()(const char*, fp8_format&) {}
  void operator()(const char*, bool&) {}
  void operator()(const char*, std::uint32_t&) {}
  void operator()(const char*, int&) {}
  void operator()(const char*, float&) {}
  void operator()(const char*, std::uint64_t&) {}
};

/// Stands for the manager's view of one direction's bucket states in a recipe's update: a range of S&.
template <class S>
struct bucket_range_archetype {
  S* begin() const { return nullptr; }
  S* end() const { return nullptr; }
};

}  // namespace detail

/// A scaling recipe: how a tensor is scaled before its low-precision cast. An empty policy type with
/// static members; its knobs live in `params_type`, an aggregate the manager stores. Every recipe has
///   using policy_kind = tequant::recipe_kind;
///   using params_type = ...;                       default-constructible, copyable
///   static constexpr std::string_view name;         what state files and messages call it
///   static void validate(const params_type&);       throws tequant::error for unusable params
///   static void visit_params(params_type&, V&& v);  v(name, field) for every field, in a fixed order
///                                                   (fp8_format, bool, uint32_t, int, float, uint64_t):
///                                                   save/load write, read and compare through it
/// and is either stateless:
///   static cast_plan plan(const params_type&, slot_id);   what a cast of that slot needs (role_of(slot))
/// or stateful (scales that depend on earlier steps), with per-bucket state for a backend:
///   template <class Backend> using state_for = S;
///   static S make_state(const params_type&, const Backend&);   an empty bucket
///   static void add_slot(S&);                                  strong guarantee
///   static std::span<float> staging(S&);                       what the comm all-reduces, with MAX
///   static bool reduces_amax(const params_type&);              whether it reduces across ranks
///   static cast_plan plan(const params_type&, S&, slot_id);    pointers into S (backend memory)
///   static void update(const params_type&, direction, Range&&);  after the reduction, every non-empty
///                                                                bucket of the direction (a range of S&)
///   static void save_state(const S&, detail::byte_writer&);
///   static S load_state(detail::byte_reader&, const params_type&, const Backend&);
/// Optional: `visit_identity(V&&)` (read-only pseudo-fields that must match on load, e.g. a window
/// algorithm's probes), `scale(const S&, j)` / `staging_amax(const S&, j)` (the manager's scale() and
/// staging_amax()), `static constexpr bool stable_plans = true` (plan() depends only on the params,
/// the slot and addresses inside S, so cast handles may keep it until a registration or state load).
/// See docs/extending.md for a recipe written outside the library.
template <class R>
concept scaling_recipe = std::derived_from<typename R::policy_kind, recipe_kind> && std::is_empty_v<R> &&
                         std::is_default_constructible_v<typename R::params_type> &&
                         std::copyable<typename R::params_type> &&
                         requires(const typename R::params_type& p, typename R::params_type& mp,
                                  detail::param_visitor_archetype& v) {
                           { R::name } -> std::convertible_to<std::string_view>;
                           R::validate(p);
                           R::visit_params(mp, v);
                         };

/// A recipe whose casts depend on no state: the plan follows from params and the slot.
template <class R>
concept stateless_recipe = scaling_recipe<R> && requires(const typename R::params_type& p, slot_id s) {
  { R::plan(p, s) } -> std::same_as<cast_plan>;
};

/// A recipe with per-bucket state in `Backend`'s memory.
template <class R, class Backend>
concept stateful_recipe_for =
    scaling_recipe<R> && requires { typename R::template state_for<Backend>; } &&
    requires(const typename R::params_type& p, typename R::template state_for<Backend>& s,
             const typename R::template state_for<Backend>& cs, const Backend& be, slot_id slot, direction d,
             detail::bucket_range_archetype<typename R::template state_for<Backend>> range, detail::byte_writer& w,
             detail::byte_reader& r) {
      { R::make_state(p, be) } -> std::same_as<typename R::template state_for<Backend>>;
      R::add_slot(s);
      { R::staging(s) } -> std::same_as<std::span<float>>;
      { R::reduces_amax(p) } -> std::convertible_to<bool>;
      { R::plan(p, s, slot) } -> std::same_as<cast_plan>;
      R::update(p, d, range);
      R::save_state(cs, w);
      { R::load_state(r, p, be) } -> std::same_as<typename R::template state_for<Backend>>;
    };

namespace detail {

/// The stateful interface, one member at a time (so the error names the one that is missing).
template <class R, class Backend>
constexpr bool check_stateful_recipe() {
  using S = typename R::template state_for<Backend>;
  using P = typename R::params_type;
#define TEQUANT_STATEFUL_REQUIREMENT(what)                                                                        \
  "tequant: Recipe (1st argument of quantization_manager) declares state_for<Backend> (a stateful recipe) but " \
  "is missing " what " - see recipe/concepts.hpp and docs/extending.md"
  if constexpr (!requires(const P& p, const Backend& be) { { R::make_state(p, be) } -> std::same_as<S>; }) {
    static_assert(dependent_false<R>, TEQUANT_STATEFUL_REQUIREMENT("`static state_for<Backend> make_state(const params_type&, const Backend&)`"));
    return false;
  } else if constexpr (!requires(S& st) { R::add_slot(st); }) {
    static_assert(dependent_false<R>, TEQUANT_STATEFUL_REQUIREMENT("`static void add_slot(state_for<Backend>&)`"));
    return false;
  } else if constexpr (!requires(S& st) { { R::staging(st) } -> std::same_as<std::span<float>>; }) {
    static_assert(dependent_false<R>, TEQUANT_STATEFUL_REQUIREMENT("`static std::span<float> staging(state_for<Backend>&)` (what the comm all-reduces)"));
    return false;
  } else if constexpr (!requires(const P& p) { { R::reduces_amax(p) } -> std::convertible_to<bool>; }) {
    static_assert(dependent_false<R>, TEQUANT_STATEFUL_REQUIREMENT("`static bool reduces_amax(const params_type&)`"));
    return false;
  } else if constexpr (!requires(const P& p, S& st, slot_id slot) { { R::plan(p, st, slot) } -> std::same_as<cast_plan>; }) {
    static_assert(dependent_false<R>, TEQUANT_STATEFUL_REQUIREMENT("`static cast_plan plan(const params_type&, state_for<Backend>&, slot_id)`"));
    return false;
  } else if constexpr (!requires(const P& p, direction d, bucket_range_archetype<S> range) { R::update(p, d, range); }) {
    static_assert(dependent_false<R>, TEQUANT_STATEFUL_REQUIREMENT("`template <class Range> static void update(const params_type&, direction, Range&&)` (the step after the reduction)"));
    return false;
  } else if constexpr (!requires(const S& st, byte_writer& w) { R::save_state(st, w); }) {
    static_assert(dependent_false<R>, TEQUANT_STATEFUL_REQUIREMENT("`static void save_state(const state_for<Backend>&, detail::byte_writer&)`"));
    return false;
  } else if constexpr (!requires(byte_reader& r, const P& p, const Backend& be) { { R::load_state(r, p, be) } -> std::same_as<S>; }) {
    static_assert(dependent_false<R>, TEQUANT_STATEFUL_REQUIREMENT("`static state_for<Backend> load_state(detail::byte_reader&, const params_type&, const Backend&)`"));
    return false;
  } else {
    return true;
  }
#undef TEQUANT_STATEFUL_REQUIREMENT
}

/// One `tequant:` error naming the first requirement a recipe misses (style guide P5).
template <class R, class Backend>
constexpr bool check_recipe() {
#define TEQUANT_RECIPE_REQUIREMENT(what)                                                                          \
  "tequant: Recipe (1st argument of quantization_manager) must model tequant::scaling_recipe: " what             \
  " - see recipe/concepts.hpp and docs/extending.md"
  if constexpr (!opts_in_as<R, recipe_kind>) {
    static_assert(dependent_false<R>, TEQUANT_RECIPE_REQUIREMENT("it does not declare `using policy_kind = tequant::recipe_kind;`"));
    return false;
  } else if constexpr (!std::is_empty_v<R>) {
    static_assert(dependent_false<R>, TEQUANT_RECIPE_REQUIREMENT("it must be an empty type (knobs go in params_type)"));
    return false;
  } else if constexpr (!requires { typename R::params_type; } ||
                       !std::is_default_constructible_v<typename R::params_type>) {
    static_assert(dependent_false<R>, TEQUANT_RECIPE_REQUIREMENT("it is missing `using params_type = ...;` (a default-constructible aggregate)"));
    return false;
  } else if constexpr (!requires { { R::name } -> std::convertible_to<std::string_view>; }) {
    static_assert(dependent_false<R>, TEQUANT_RECIPE_REQUIREMENT("it is missing `static constexpr std::string_view name`"));
    return false;
  } else if constexpr (!requires(const typename R::params_type& p) { R::validate(p); }) {
    static_assert(dependent_false<R>, TEQUANT_RECIPE_REQUIREMENT("it is missing `static void validate(const params_type&)`"));
    return false;
  } else if constexpr (!requires(typename R::params_type& p, param_visitor_archetype& v) { R::visit_params(p, v); }) {
    static_assert(dependent_false<R>, TEQUANT_RECIPE_REQUIREMENT("it is missing `template <class V> static void visit_params(params_type&, V&&)` (how save/load see its params)"));
    return false;
  } else if constexpr (requires { typename R::template state_for<Backend>; }) {
    return check_stateful_recipe<R, Backend>();
  } else if constexpr (!stateless_recipe<R>) {
    static_assert(dependent_false<R>, TEQUANT_RECIPE_REQUIREMENT("it is missing `static cast_plan plan(const params_type&, slot_id)` (or, for a stateful recipe, `template <class Backend> using state_for`)"));
    return false;
  } else {
    return true;
  }
#undef TEQUANT_RECIPE_REQUIREMENT
}

}  // namespace detail
}  // namespace tequant
