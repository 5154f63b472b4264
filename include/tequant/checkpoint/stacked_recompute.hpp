// SPDX-License-Identifier: Apache-2.0
// Stack-safe activation recompute: per-frame snapshots, nested frames, LIFO restore.
#pragma once
#include "tequant/checkpoint/concepts.hpp"
#include "tequant/checkpoint/frame.hpp"
#include "tequant/checkpoint/frame_stack.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// ARCHITECTURE §4. A frame's original forward snapshots, lazily per forward slot, what each cast
/// used; its replay casts with exactly that and records no amax. A checkpoint forward that runs inside
/// an enclosing replay takes its values from that replay's snapshot and reserves them as its own.
/// Frames whose forward runs without gradients (or whose inputs need none) take no snapshot and
/// inherit the enclosing context. Independent of any train/eval mode.
struct stacked_recompute {
  using policy_kind = checkpoint_kind;
  template <class Backend>
  using stack_for = frame_stack<Backend>;
};

static_assert(checkpoint_policy<stacked_recompute>);

}  // namespace tequant
