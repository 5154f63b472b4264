// SPDX-License-Identifier: Apache-2.0
// What each policy becomes inside quantization_manager: the recipe's bucket states, the boundary's
// flush_control, the checkpoint policy's frame stack; or, after a failed policy check, an inert
// stand-in, so that the user sees one `tequant:` static_assert per wrong policy and not a cascade.
#pragma once
#include "tequant/boundary/concepts.hpp"
#include "tequant/boundary/flush_control.hpp"
#include "tequant/checkpoint/concepts.hpp"
#include "tequant/recipe/bucket_states.hpp"
#include "tequant/recipe/concepts.hpp"

namespace tequant::detail {

/// The stand-in for a part whose policy failed its check (style guide P5).
struct invalid_part {
  constexpr invalid_part() noexcept = default;
  template <class A, class... More>
  constexpr explicit invalid_part(A&&, More&&...) noexcept {}
};

template <bool Valid, class R, class B>
struct recipe_part_of {
  using type = invalid_part;
  using params = invalid_part;
  using states = invalid_part;
};
template <class R, class B>
struct recipe_part_of<true, R, B> {
  using type = bucket_states<R, B>;
  using params = typename R::params_type;
  using states = typename bucket_states<R, B>::container;
};

// Checks that run only when the checks they depend on passed (no cascade from an unusable backend).
template <bool Run, class R, class B>
constexpr bool check_recipe_if() {
  if constexpr (Run) return check_recipe<R, B>();
  else return false;
}
template <bool Run, class C, class B>
constexpr bool check_checkpoint_if() {
  if constexpr (Run) return check_checkpoint<C, B>();
  else return false;
}
template <bool Valid, class P>
struct flush_part_of {
  using type = invalid_part;
};
template <class P>
struct flush_part_of<true, P> {
  using type = flush_control<P>;
};
template <bool Valid, class C, class B>
struct stack_part_of {
  using type = invalid_part;
};
template <class C, class B>
struct stack_part_of<true, C, B> {
  using type = typename C::template stack_for<B>;
};

}  // namespace tequant::detail
