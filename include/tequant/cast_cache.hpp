// SPDX-License-Identifier: Apache-2.0
// Reuse of one slot's cast across the micro-batches of a step (TransformerEngine's is_first_microbatch):
// a weight does not change inside a step, so its FP8 copy made by the first micro-batch serves the
// others, and its amax is recorded once.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tequant/backend/layouts.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/error.hpp"
#include "tequant/quantized_tensor.hpp"

namespace tequant {

/// One slot's cached cast. cast() quantizes only when something the codes depend on changed since the
/// cached cast: the caller's key (the step, and a version the caller bumps whenever the tensor's values
/// change, e.g. after each optimizer step), the tensor's address or shape, the scale the plan applies
/// (a delayed update or a checkpoint snapshot holding another value), or the plan's mode, format or
/// options. A checkpoint replay's plan (the original forward's scale, nothing recorded) hits the cast of
/// that forward when the scale is the same. A plan that records an amax never hits a cast that recorded
/// none, so the step's amax is recorded exactly once. Stochastic-rounding plans (rng_offset set) are
/// never served from the cache: each cast must draw its own bits.
///
/// On a device backend, checking a tensor_scale plan reads its scale (a host synchronisation).
template <class Backend>
class cast_cache {
 public:
  struct key {
    std::uint64_t step = 0;     ///< the caller's step counter
    std::uint64_t version = 0;  ///< bumped by the caller whenever the tensor's values change
    bool operator==(const key&) const = default;
  };

  /// The cast of x [rows, cols] with `plan`: the cached one when still valid, a fresh one otherwise.
  /// `cast_now` (optional) says which. A disabled plan (outside an enabled autocast region) is refused.
  /// The result is the cache's own storage: read it (output() gives its spans), never write into it.
  template <class T>
  quantized_tensor<Backend>& cast(const Backend& be, const cast_plan& plan, matrix_view<const T> x, key k,
                                        bool* cast_now = nullptr) {
    detail::require(plan.enabled, "cast_cache::cast: the plan is disabled (outside an enabled autocast region); "
                                  "run the GEMM in high precision instead of casting");
    const entry now = describe(be, plan, x.data, x.rows, x.cols, k);
    const bool hit = valid_ && plan.rng_offset == nullptr && now.same_cast(cached_) &&
                     (plan.amax == nullptr || cached_.recorded_amax);
    if (!hit) {
      valid_ = false;  // a failing quantize leaves nothing half-written behind as valid
      q_.prepare(be, plan, x.rows, x.cols);
      be.quantize(x, plan, q_.output());
      cached_ = now;
      valid_ = true;
      ++casts_;
    } else {
      ++reuses_;
    }
    if (cast_now != nullptr) *cast_now = !hit;
    return q_;
  }

  /// Forgets the cached cast (the next cast() quantizes).
  void invalidate() noexcept { valid_ = false; }
  bool valid() const noexcept { return valid_; }
  /// Casts made and casts saved since construction.
  std::uint64_t casts() const noexcept { return casts_; }
  std::uint64_t reuses() const noexcept { return reuses_; }

 private:
  struct entry {
    key k;
    const void* data = nullptr;
    std::size_t rows = 0, cols = 0;
    float scale = 0.0f;  // the value the plan's tensor_scale points at (0 for the other modes)
    scaling_mode mode = scaling_mode::tensor_scale;
    fp8_dtype dtype = fp8_dtype::e4m3;
    bool tile_2d = false, power_2_scale = false, columnwise_rht = false;
    float amax_epsilon = 0.0f;
    bool recorded_amax = false;
    bool same_cast(const entry& o) const noexcept {
      return k == o.k && data == o.data && rows == o.rows && cols == o.cols && scale == o.scale && mode == o.mode &&
             dtype == o.dtype && tile_2d == o.tile_2d && power_2_scale == o.power_2_scale &&
             columnwise_rht == o.columnwise_rht && amax_epsilon == o.amax_epsilon;
    }
  };

  static entry describe(const Backend& be, const cast_plan& plan, const void* data, std::size_t rows, std::size_t cols,
                        key k) {
    entry e;
    e.k = k;
    e.data = data;
    e.rows = rows;
    e.cols = cols;
    if (plan.mode == scaling_mode::tensor_scale) {
      detail::require(plan.scale != nullptr, "cast_cache::cast: a tensor_scale plan without a scale");
      e.scale = be.read(plan.scale);
    }
    e.mode = plan.mode;
    e.dtype = plan.dtype;
    e.tile_2d = plan.tile_2d;
    e.power_2_scale = plan.power_2_scale;
    e.columnwise_rht = plan.columnwise_rht;
    e.amax_epsilon = plan.amax_epsilon;
    e.recorded_amax = plan.amax != nullptr;
    return e;
  }

  quantized_tensor<Backend> q_;
  entry cached_{};
  bool valid_ = false;
  std::uint64_t casts_ = 0, reuses_ = 0;
};

}  // namespace tequant
