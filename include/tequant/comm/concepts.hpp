// SPDX-License-Identifier: Apache-2.0
// What an amax communicator is: the one collective the manager needs (a MAX all-reduce).
#pragma once
#include <concepts>
#include <cstddef>
#include <cstdint>

#include "tequant/policy.hpp"

namespace tequant {

/// Reduces staging amaxes across the ranks of a reduction group.
/// Semantic requirements:
///  1. `all_reduce_max(data, n, group)` replaces data[0..n) by the element-wise maximum over all ranks
///     of `group`, in place (NaN handling as the transport's MAX; every rank ends with equal values).
///  2. Every rank calls it for the same buckets in the same order (the manager guarantees the order).
///  3. Failure raises `tequant::error`; the manager then keeps the update pending.
///  4. `rank()` is this process's rank, `size(group)` the number of ranks in `group`.
template <class C>
concept amax_comm = std::derived_from<typename C::policy_kind, comm_kind> &&
                    requires(C& c, const C& cc, float* data, std::size_t n, std::uint32_t group) {
                      c.all_reduce_max(data, n, group);
                      { cc.rank() } -> std::convertible_to<std::uint32_t>;
                      { cc.size(group) } -> std::convertible_to<std::uint32_t>;
                    };

namespace detail {

template <class C>
constexpr bool check_comm() {
  static_assert(amax_comm<C>,
                "tequant: Comm (4th argument of quantization_manager) must model tequant::amax_comm "
                "(single_process, mpi_comm, nccl_comm, c10d_comm): policy_kind = tequant::comm_kind, "
                "all_reduce_max(float*, n, group), rank(), size(group) - see comm/concepts.hpp");
  return amax_comm<C>;
}

}  // namespace detail
}  // namespace tequant
