// SPDX-License-Identifier: Apache-2.0
// Delayed-scaling state of one module in TransformerEngine's layout, so that a run can move between
// TE (module.get_extra_state / set_extra_state) and tequant in both directions.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tequant/error.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/manager_types.hpp"

namespace tequant {

/// TE's fp8_meta of one module: scale_fwd [3g] and amax_history_fwd [L, 3g] (slots input, weight,
/// output per GEMM), scale_bwd [2g] and amax_history_bwd [L, 2g] (grad_output, grad_input per GEMM);
/// histories row-major, row 0 = the current staging amax, rows 1..L-1 = committed amaxes oldest first.
struct te_delayed_state {
  std::uint32_t history_length = 0;
  std::vector<float> scale_fwd, amax_history_fwd;
  std::vector<float> scale_bwd, amax_history_bwd;
};

/// Exports module `h`'s state. The oldest of the L committed amaxes tequant keeps is not part of
/// TE's layout; it never influences a later update (it leaves the window first).
template <class M>
te_delayed_state export_te_state(const M& m, module_handle h) {
  static_assert(M::is_stateful, "tequant: export_te_state needs a stateful recipe (delayed_scaling)");
  static_assert(requires { m.recipe_state()[0].export_te_history(0, 0, std::span<float>()); },
                "tequant: export_te_state needs delayed scaling's state (TE's fp8_meta layout)");
  auto& mm = const_cast<M&>(m);  // read only; the bucket accessors are non-const
  te_delayed_state t;
  t.history_length = m.params().history_length;
  const std::size_t L = t.history_length;
  auto one = [&](slot_id first, std::uint32_t n, std::vector<float>& scale, std::vector<float>& hist) {
    auto& bk = mm.recipe_state()[first.bucket];
    scale.resize(n);
    hist.resize(L * n);
    for (std::uint32_t k = 0; k < n; ++k) scale[k] = bk.scale(first.index + k);
    bk.export_te_history(first.index, n, hist);
  };
  const std::uint32_t g = m.num_gemms(h);
  one(m.slot(h, forward_role::input, 0), 3 * g, t.scale_fwd, t.amax_history_fwd);
  one(m.slot(h, backward_role::grad_output, 0), 2 * g, t.scale_bwd, t.amax_history_bwd);
  return t;
}

/// Imports TE's state into module `h`. Sizes are checked before anything changes, so on the host
/// backend a failure leaves the state untouched (strong guarantee); on a device backend a failing
/// upload can leave the module half imported (basic guarantee).
template <class M>
void import_te_state(M& m, module_handle h, const te_delayed_state& t) {
  static_assert(M::is_stateful, "tequant: import_te_state needs a stateful recipe (delayed_scaling)");
  static_assert(requires { m.recipe_state()[0].import_te_history(0, 0, std::span<const float>()); },
                "tequant: import_te_state needs delayed scaling's state (TE's fp8_meta layout)");
  const std::uint32_t L = m.params().history_length;
  const std::uint32_t g = m.num_gemms(h);
  const std::string& name = m.module_name(h);
  detail::require(t.history_length == L, "import_te_state('", name, "'): history length ", t.history_length,
                  " differs from this manager's ", L, " (delayed_params::history_length)");
  auto check = [&](const std::vector<float>& v, std::size_t want, const char* what, const char* shape) {
    detail::require(v.size() == want, "import_te_state('", name, "'): ", what, " has ", v.size(), " floats, ", shape,
                    " needs ", want);
  };
  check(t.scale_fwd, 3ull * g, "scale_fwd", "[3*num_gemms]");
  check(t.amax_history_fwd, std::size_t{L} * 3 * g, "amax_history_fwd", "[L, 3*num_gemms]");
  check(t.scale_bwd, 2ull * g, "scale_bwd", "[2*num_gemms]");
  check(t.amax_history_bwd, std::size_t{L} * 2 * g, "amax_history_bwd", "[L, 2*num_gemms]");
  auto one = [&](slot_id first, std::uint32_t n, const std::vector<float>& scale, const std::vector<float>& hist) {
    auto& bk = m.recipe_state()[first.bucket];
    bk.import_te_history(first.index, n, hist);
    for (std::uint32_t k = 0; k < n; ++k) bk.set_scale(first.index + k, scale[k]);
  };
  one(m.slot(h, forward_role::input, 0), 3 * g, t.scale_fwd, t.amax_history_fwd);
  one(m.slot(h, backward_role::grad_output, 0), 2 * g, t.scale_bwd, t.amax_history_bwd);
}

}  // namespace tequant
