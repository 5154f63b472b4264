// SPDX-License-Identifier: Apache-2.0
// No activation recompute: using a checkpoint frame is a compile-time error.
#pragma once
#include "tequant/checkpoint/concepts.hpp"
#include "tequant/checkpoint/frame_stack.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// For models that never recompute activations: the stack is empty and returns the live plan, so the
/// cast path costs nothing for frames.
struct no_recompute {
  using policy_kind = checkpoint_kind;
  template <class Backend>
  using stack_for = no_frames<Backend>;
};

static_assert(checkpoint_policy<no_recompute>);

}  // namespace tequant
