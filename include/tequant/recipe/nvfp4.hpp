// SPDX-License-Identifier: Apache-2.0
// NVFP4 (TE's NVFP4BlockScaling): E2M1 data, an E4M3 scale per 1x16 block (16x16 tile for weights) and a
// per-tensor fp32 scale from each cast's own amax. Stateless in its scales; its only state is the
// stochastic-rounding stream position of each gradient slot, which save/load and checkpoint frames keep.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "tequant/cast_plan.hpp"
#include "tequant/error.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/persistence/bytes.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/concepts.hpp"

namespace tequant {

/// Runtime knobs of NVFP4, TE's NVFP4BlockScaling fields as positive flags.
struct nvfp4_params {
  /// One block scale per 16x16 tile for forward weights (TE: disable_2d_quantization = False).
  bool weight_2d = true;
  /// Gradients (the backward slots) round stochastically (TE: disable_stochastic_rounding = False).
  bool stochastic_rounding = true;
  /// TE's 16x16 random Hadamard transform of the columnwise (weight-gradient) copies of inputs, outputs
  /// and gradients, never of weights (TE: disable_rht = False). Those tensors then need rows in whole
  /// 16-row groups.
  bool random_hadamard_transform = true;
  /// Key of the stochastic-rounding generator. The same on every rank, so a tensor replicated on every
  /// rank rounds identically; a state file written with another seed is refused.
  std::uint64_t seed = 0x5EED'F4F4'0000'0001ull;
  friend constexpr bool operator==(const nvfp4_params&, const nvfp4_params&) = default;
};

/// One bucket's stochastic-rounding positions: per slot, the next group of four random words its casts
/// draw (host memory whatever the backend: cast_plan::rng_offset is a host pointer).
struct nvfp4_rng_state {
  std::uint64_t seed = 0;
  std::vector<std::uint64_t> offsets;
  /// One unused value per slot: the manager sizes buckets by the staging span; NVFP4 reduces nothing.
  std::vector<float> staging;
};

/// NVFP4 block scaling. Shapes: rows (product of leading dims) and cols (last dim) even.
struct nvfp4_scaling {
  using policy_kind = recipe_kind;
  using params_type = nvfp4_params;
  template <class Backend>
  using state_for = nvfp4_rng_state;
  static constexpr std::string_view name = "nvfp4_scaling";

  /// Where slot j's stream starts: 2^40 groups (2^42 elements) apart, so the slots of a bucket never
  /// draw the same bits.
  static constexpr std::uint64_t slot_stream_stride = std::uint64_t{1} << 40;

  /// Every combination of the knobs is one of TE's (each flag is an independent switch there).
  static void validate(const nvfp4_params&) noexcept {}
  template <class V>
  static void visit_params(nvfp4_params& p, V&& v) {
    v("weight_2d", p.weight_2d);
    v("stochastic_rounding", p.stochastic_rounding);
    v("random_hadamard_transform", p.random_hadamard_transform);
    v("seed", p.seed);
  }

  template <class Backend>
  static nvfp4_rng_state make_state(const nvfp4_params& p, const Backend&) {
    nvfp4_rng_state s;
    s.seed = p.seed;
    return s;
  }
  static void add_slot(nvfp4_rng_state& s) {
    s.offsets.reserve(s.offsets.size() + 1);
    s.staging.reserve(s.staging.size() + 1);
    s.offsets.push_back(s.offsets.size() * slot_stream_stride);  // cannot throw: room reserved
    s.staging.push_back(0.0f);
  }
  static std::span<float> staging(nvfp4_rng_state& s) noexcept { return s.staging; }
  static constexpr bool reduces_amax(const nvfp4_params&) noexcept { return false; }

  /// plan() reads no state value (the offset's address, the seed set at make_state/load_state): cast
  /// handles keep it until a registration or state load.
  static constexpr bool stable_plans = true;
  /// 1x16 blocks; forward weights in 16x16 tiles when weight_2d; the columnwise copies of everything
  /// but weights through the Hadamard transform when random_hadamard_transform (TE's fwd_inp and bwd_grad
  /// quantizers); gradients draw from their slot's stream when stochastic_rounding.
  static cast_plan plan(const nvfp4_params& p, nvfp4_rng_state& s, slot_id slot) noexcept {
    cast_plan c{nullptr, nullptr, fp8_dtype::e4m3, scaling_mode::nvfp4};
    const bool weight = role_of(slot) == tensor_role::weight;
    c.tile_2d = p.weight_2d && weight;
    c.columnwise_rht = p.random_hadamard_transform && !weight;
    if (p.stochastic_rounding && slot.dir == direction::backward) {
      c.rng_offset = &s.offsets[slot.index];
      c.rng_seed = s.seed;
    }
    return c;
  }
  /// Scales come from each cast's own amax: nothing to update.
  template <class Range>
  static void update(const nvfp4_params&, direction, Range&&) noexcept {}

  static void save_state(const nvfp4_rng_state& s, detail::byte_writer& w) {
    w.u64(s.seed);
    w.u32(static_cast<std::uint32_t>(s.offsets.size()));
    for (const std::uint64_t o : s.offsets) w.u64(o);
  }
  template <class Backend>
  static nvfp4_rng_state load_state(detail::byte_reader& r, const nvfp4_params& p, const Backend&) {
    nvfp4_rng_state s;
    s.seed = r.u64();
    detail::require(s.seed == p.seed, "nvfp4_scaling: the state was written with stochastic-rounding seed ", s.seed,
                    ", this manager's seed is ", p.seed, " (set nvfp4_params::seed to the saved one)");
    const std::size_t n = r.count("nvfp4 slot count", 8);
    s.offsets.resize(n);
    for (std::uint64_t& o : s.offsets) o = r.u64();
    s.staging.assign(n, 0.0f);
    return s;
  }
};

static_assert(scaling_recipe<nvfp4_scaling>);

}  // namespace tequant
