// SPDX-License-Identifier: Apache-2.0
// No activation recompute: using a checkpoint frame is a compile-time error.
#pragma once
#include "tequant/checkpoint/concepts.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// For models that never recompute activations: frames do not exist, so nothing is tracked.
struct no_recompute {
  using policy_kind = checkpoint_kind;
  static constexpr bool supports_recompute = false;
};

static_assert(checkpoint_policy<no_recompute>);

}  // namespace tequant
