// SPDX-License-Identifier: Apache-2.0
// What each policy becomes inside quantization_manager: the checks of its five policies, then the
// recipe's bucket states, the boundary's flush_control, the checkpoint policy's frame stack; or, after
// a failed policy check, an inert stand-in, so that the user sees one `tequant:` static_assert per
// wrong policy and not a cascade; and the small questions the manager asks of a part before it
// sequences it.
#pragma once
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "tequant/backend/concepts.hpp"
#include "tequant/boundary/concepts.hpp"
#include "tequant/boundary/flush_control.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/checkpoint/concepts.hpp"
#include "tequant/comm/concepts.hpp"
#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/manager_types.hpp"
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

/// A manager's policies, checked (each check reports its own `tequant:` error; those that depend on
/// the backend run only with a usable one), and the part each becomes: the manager holds these.
template <class Recipe, class Boundary, class Checkpoint, class Comm, class Backend>
struct manager_parts {
  static constexpr bool valid_backend = check_backend<Backend>();
  static constexpr bool valid_recipe = check_recipe_if<valid_backend, Recipe, Backend>();
  static constexpr bool valid_boundary = check_boundary<Boundary>();
  static constexpr bool valid_checkpoint = check_checkpoint_if<valid_backend, Checkpoint, Backend>();
  static constexpr bool valid_comm = check_comm<Comm>();

  using recipe_of = recipe_part_of<valid_recipe, Recipe, Backend>;
  using recipe = typename recipe_of::type;
  using flush = typename flush_part_of<valid_boundary, Boundary>::type;
  using stack = typename stack_part_of<valid_checkpoint, Checkpoint, Backend>::type;
  using backend = std::conditional_t<valid_backend, Backend, invalid_part>;
  static constexpr bool stateful = valid_recipe && has_state<Recipe, Backend>;
};

// The recipe's params as it validates them (a recipe that failed its check has reported already:
// nothing more is asked of it).
template <bool Valid, class R, class Params>
Params validated(Params p) {
  if constexpr (Valid) R::validate(p);
  return p;
}

// Whether the frame stack's close() ignores `unwinding` except for recording frames (stacked_recompute's
// does): then guards of replays and inactive frames need not ask std::uncaught_exceptions().
template <class Stack>
inline constexpr bool close_ignores_unwinding = requires { requires Stack::unwinding_matters_only_when_recording; };

// The plan a cast handle's forward cast gets inside open frames: the stack's optional
// plan_forward_kept (`kept` itself where the frames leave it as it is), else its plan_forward's copy in
// `scratch`.
template <class Stack, class Backend, class Describe>
TEQUANT_ALWAYS_INLINE const cast_plan& plan_forward_kept(Stack& stack, slot_id slot, const cast_plan& kept,
                                                         cast_plan& scratch, Backend& backend,
                                                         std::size_t forward_slots, const void* owner,
                                                         Describe&& describe) {
  if constexpr (requires { stack.plan_forward_kept(slot, kept, scratch, backend, forward_slots, owner, describe); }) {
    return stack.plan_forward_kept(slot, kept, scratch, backend, forward_slots, owner, describe);
  } else {
    scratch = stack.plan_forward(slot, kept, backend, forward_slots, owner, describe);
    return scratch;
  }
}

// checkpoint_forward() / checkpoint_replay() need a frame stack that recomputes: where it does not, one
// `tequant:` error each, and the manager's `if constexpr` on the answer builds nothing more (no cascade).
template <class Stack>
constexpr bool can_checkpoint_forward() {
  static_assert(recompute_stack<Stack>,
                "tequant: checkpoint_forward() needs a Checkpoint policy that supports recompute "
                "(stacked_recompute); this manager's Checkpoint (3rd argument of quantization_manager) has "
                "no frame stack (no_recompute)");
  return recompute_stack<Stack>;
}
template <class Stack>
constexpr bool can_checkpoint_replay() {
  static_assert(recompute_stack<Stack>,
                "tequant: checkpoint_replay() needs a Checkpoint policy that supports recompute "
                "(stacked_recompute); this manager's Checkpoint (3rd argument of quantization_manager) has "
                "no frame stack (no_recompute)");
  return recompute_stack<Stack>;
}

// What stats() reports of the updates. Counted where the updates run, a backward one possibly on an
// engine's thread while the training thread reads.
struct update_counters {
  std::atomic<std::uint64_t> forward{0}, backward{0}, collectives{0};
  void count(direction d, std::uint64_t collectives_issued) noexcept {
    collectives.fetch_add(collectives_issued, std::memory_order_relaxed);
    (d == direction::forward ? forward : backward).fetch_add(1, std::memory_order_relaxed);
  }
};

// stats(), from the parts that keep each figure. Inlined by force: as an ordinary helper (filling the
// struct through a reference, or by value) it changed how GCC compiled the shared delayed update in
// the training step's translation unit (+0.5 k instructions per bench_manager step, on both sides).
template <class Flush, class Stack>
TEQUANT_ALWAYS_INLINE manager_stats stats_of(const update_counters& counters, const Flush& flush, const Stack& frames,
                                             std::uint32_t autocast_depth) noexcept {
  manager_stats r;
  r.forward_updates = counters.forward.load(std::memory_order_relaxed);
  r.backward_updates = counters.backward.load(std::memory_order_relaxed);
  r.collectives = counters.collectives.load(std::memory_order_relaxed);
  r.pending = flush.pending();
  r.autocast_depth = autocast_depth;
  r.scope_depth = flush.scope_depth();
  r.checkpoint_depth = frames.depth();
  r.outstanding_snapshots = frames.outstanding();
  return r;
}

// The live scale and the staging amax of a slot, where the recipe part keeps them; else one
// `tequant:` error naming the recipe (R).
template <class R, class Part>
float scale_of(const Part& recipe, slot_id s) {
  if constexpr (requires { recipe.scale(s); })
    return recipe.scale(s);
  else
    fail("scale: recipe ", R::name, " keeps no per-slot scale; its scales are computed per cast");
}
template <class R, class Part>
float staging_amax_of(const Part& recipe, slot_id s) {
  if constexpr (requires { recipe.staging_amax(s); })
    return recipe.staging_amax(s);
  else
    fail("staging_amax: recipe ", R::name, " keeps no staging amax");
}

// register_module's arguments: at least one GEMM, room for one more module, and reduction groups that
// exist in a comm that has several (one that cannot say has one).
template <class Table, class Comm>
void check_registration(const Table& table, const Comm& comm, const std::string& name, std::uint32_t num_gemms,
                        reduction_groups groups) {
  require(num_gemms >= 1, "register_module('", name, "'): num_gemms must be >= 1");
  require(table.module_count() < 0xFFFFFFFFu, "register_module('", name, "'): too many modules");
  if constexpr (requires(const Comm& c) { { c.groups() } -> std::convertible_to<std::uint32_t>; })
    require(groups.forward < comm.groups() && groups.backward < comm.groups(), "register_module('", name,
            "'): reduction groups (forward ", groups.forward, ", backward ", groups.backward,
            ") must be below the communicator's ", comm.groups(), " groups");
}

}  // namespace tequant::detail
