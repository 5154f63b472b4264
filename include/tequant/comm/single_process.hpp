// SPDX-License-Identifier: Apache-2.0
// The communicator of a single process: every reduction is the identity.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tequant/comm/concepts.hpp"
#include "tequant/policy.hpp"

namespace tequant {

/// One rank, nothing to exchange; empty so the manager spends no byte on it.
struct single_process {
  using policy_kind = comm_kind;
  void all_reduce_max(float* /*data*/, std::size_t /*n*/, std::uint32_t /*group*/) noexcept {}
  std::uint32_t rank() const noexcept { return 0; }
  std::uint32_t size(std::uint32_t /*group*/) const noexcept { return 1; }
};

static_assert(amax_comm<single_process>);

}  // namespace tequant
