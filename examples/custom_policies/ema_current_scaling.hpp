// SPDX-License-Identifier: Apache-2.0
// A scaling recipe written outside the library: per-tensor scales from an exponential moving average
// of each tensor's amax (a smoother delayed scaling). It uses only tequant's public concepts; nothing in
// tequant names it.
#pragma once
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <tequant/cast_plan.hpp>
#include <tequant/error.hpp>
#include <tequant/format/formats.hpp>
#include <tequant/manager_types.hpp>
#include <tequant/persistence/bytes.hpp>
#include <tequant/policy.hpp>
#include <tequant/recipe/concepts.hpp>

namespace custom {

// example-begin ema_params
struct ema_params {
  tequant::fp8_format format = tequant::fp8_format::hybrid;
  float decay = 0.9f;  ///< ema = decay * ema + (1 - decay) * amax; the first amax seeds it
  bool reduce_amax = true;
};
// example-end ema_params

/// One bucket: a scale and a staging amax per slot in the backend's memory (casts read and write them
/// there), the moving averages on the host (only the update reads them).
template <class Backend>
class ema_bucket {
 public:
  using buffer = decltype(std::declval<Backend&>().template make_buffer<float>(std::size_t{}));

  explicit ema_bucket(const Backend& backend) : backend_(backend) {}

  std::uint32_t size() const noexcept { return n_; }
  float* scale() noexcept { return scale_.data(); }
  const float* scale() const noexcept { return scale_.data(); }
  float* staging() noexcept { return staging_.data(); }
  const float* staging() const noexcept { return staging_.data(); }
  std::vector<float>& ema() noexcept { return ema_; }
  const std::vector<float>& ema() const noexcept { return ema_; }
  /// A backend is a handle (copies share the device and stream): reading through a const bucket uses it.
  Backend& backend() const noexcept { return backend_; }

  /// Strong guarantee: the new buffers are filled before anything is replaced.
  void add_slot(float scale = 1.0f, float ema = 0.0f) {
    std::vector<float> e = ema_;
    e.push_back(ema);
    if (n_ == cap_) {
      const std::uint32_t cap = cap_ == 0 ? 8 : 2 * cap_;
      buffer sc = backend_.template make_buffer<float>(cap), st = backend_.template make_buffer<float>(cap);
      if (n_ != 0) {
        backend_.copy(sc.data(), scale_.data(), n_);
        backend_.copy(st.data(), staging_.data(), n_);
      }
      scale_ = std::move(sc);
      staging_ = std::move(st);
      cap_ = cap;
    }
    backend_.fill(scale_.data() + n_, 1, scale);
    backend_.fill(staging_.data() + n_, 1, 0.0f);
    ema_ = std::move(e);
    ++n_;
  }

 private:
  mutable Backend backend_;
  buffer scale_{}, staging_{};
  std::vector<float> ema_;
  std::uint32_t n_ = 0, cap_ = 0;
};

// example-begin ema_recipe_head
/// The recipe: a stateful per-tensor recipe (scaling_mode::tensor_scale), so the manager reduces its
/// staging amaxes across ranks, snapshots its scales in checkpoint frames and saves its state.
struct ema_current_scaling {
  using policy_kind = tequant::recipe_kind;
  using params_type = ema_params;
  template <class Backend>
  using state_for = ema_bucket<Backend>;
  static constexpr std::string_view name = "custom::ema_current_scaling";

  static void validate(const ema_params& p) {
    tequant::check_training_format(p.format, "ema_current_scaling");
    if (!(p.decay >= 0.0f && p.decay < 1.0f))
      throw tequant::error("tequant: ema_current_scaling: decay " + std::to_string(p.decay) + " must be in [0, 1)");
  }
  template <class V>
  static void visit_params(ema_params& p, V&& v) {
    v("format", p.format);
    v("decay", p.decay);
    v("reduce_amax", p.reduce_amax);
  }
  // example-end ema_recipe_head

  // example-begin ema_recipe_state
  template <class Backend>
  static ema_bucket<Backend> make_state(const ema_params&, const Backend& backend) {
    return ema_bucket<Backend>(backend);
  }
  template <class Backend>
  static void add_slot(ema_bucket<Backend>& s) {
    s.add_slot();
  }
  template <class Backend>
  static std::span<float> staging(ema_bucket<Backend>& s) noexcept {
    return {s.staging(), s.size()};
  }
  static bool reduces_amax(const ema_params& p) noexcept { return p.reduce_amax; }

  template <class Backend>
  static tequant::cast_plan plan(const ema_params& p, ema_bucket<Backend>& s, tequant::slot_id slot) noexcept {
    tequant::cast_plan c;
    c.scale = s.scale() + slot.index;
    c.amax = s.staging() + slot.index;
    c.dtype = tequant::dtype_for(p.format, slot.dir);
    c.mode = tequant::scaling_mode::tensor_scale;
    return c;
  }
  // example-end ema_recipe_state

  /// The step of one slot (public so that tests can check the numerics by hand).
  static float next_ema(float ema, float amax, float decay) noexcept {
    if (!(amax > 0.0f) || !std::isfinite(amax)) return ema;  // nothing seen, or unusable: keep
    return ema == 0.0f ? amax : decay * ema + (1.0f - decay) * amax;
  }
  static float scale_for(float ema, tequant::fp8_dtype t, float current) noexcept {
    return ema > 0.0f ? tequant::fp8_max(t) / ema : current;
  }

  // example-begin ema_recipe_update
  template <class Range>
  static void update(const ema_params& p, tequant::direction d, Range&& buckets) {
    const tequant::fp8_dtype t = tequant::dtype_for(p.format, d);
    for (auto& s : buckets) {
      const std::uint32_t n = s.size();
      std::vector<float> amax(n), scale(n);
      s.backend().download(amax.data(), s.staging(), n);
      s.backend().download(scale.data(), s.scale(), n);
      for (std::uint32_t j = 0; j < n; ++j) {
        s.ema()[j] = next_ema(s.ema()[j], amax[j], p.decay);
        scale[j] = scale_for(s.ema()[j], t, scale[j]);
      }
      s.backend().upload(s.scale(), scale.data(), n);
      s.backend().fill(s.staging(), n, 0.0f);
    }
  }
  // example-end ema_recipe_update

  // example-begin ema_recipe_persist
  template <class Backend>
  static void save_state(const ema_bucket<Backend>& s, tequant::detail::byte_writer& w) {
    const std::uint32_t n = s.size();
    std::vector<float> scale(n), staging(n);
    s.backend().download(scale.data(), s.scale(), n);
    s.backend().download(staging.data(), s.staging(), n);
    w.u32(n);
    for (std::uint32_t j = 0; j < n; ++j) {
      w.f32(scale[j]);
      w.f32(staging[j]);
      w.f32(s.ema()[j]);
    }
  }
  template <class Backend>
  static ema_bucket<Backend> load_state(tequant::detail::byte_reader& r, const ema_params&, const Backend& backend) {
    const std::size_t n = r.count("ema slot count", 12);
    ema_bucket<Backend> s(backend);
    for (std::size_t j = 0; j < n; ++j) {
      const float scale = r.f32(), staging = r.f32(), ema = r.f32();
      s.add_slot(scale, ema);
      s.backend().fill(s.staging() + j, 1, staging);
    }
    return s;
  }

  template <class Backend>
  static float scale(const ema_bucket<Backend>& s, std::uint32_t j) {
    return s.backend().read(s.scale() + j);
  }
  template <class Backend>
  static float staging_amax(const ema_bucket<Backend>& s, std::uint32_t j) {
    return s.backend().read(s.staging() + j);
  }
  // example-end ema_recipe_persist
};

static_assert(tequant::scaling_recipe<ema_current_scaling>);

}  // namespace custom
