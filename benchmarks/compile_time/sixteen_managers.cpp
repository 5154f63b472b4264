// SPDX-License-Identifier: Apache-2.0
// A translation unit with 16 managers (4 recipes x 4 boundaries, stacked recompute, host backend), each
// running one training step's casts, saves and a replay: what scripts/compile-time.sh compiles at -O3 to
// show what many manager types in one TU cost. Never run; only compiled.
#include <tequant/backend/host.hpp>
#include <tequant/boundary/autocast_entry.hpp>
#include <tequant/boundary/engine_callback.hpp>
#include <tequant/boundary/explicit_scope.hpp>
#include <tequant/boundary/first_module_owner.hpp>
#include <tequant/checkpoint/stacked_recompute.hpp>
#include <tequant/manager.hpp>
#include <tequant/persistence.hpp>
#include <tequant/quantized_tensor.hpp>
#include <tequant/recipe/block.hpp>
#include <tequant/recipe/current.hpp>
#include <tequant/recipe/delayed.hpp>
#include <tequant/recipe/mxfp8.hpp>

#include <vector>

namespace {

struct hooks {
  bool in_backward() const { return false; }
  bool queue_callback(void (*)(void*), void*) { return false; }
};

template <class Manager>
void cast(Manager& m, tequant::slot_id slot, const std::vector<float>& x) {
  const tequant::cast_plan plan = m.plan_cast(slot);
  const auto& be = m.backend();
  tequant::quantized_tensor<typename Manager::backend_type> q;
  q.prepare(be, plan, 128, 128);
  be.quantize(tequant::matrix_view<const float>{x.data(), 128, 128}, plan, q.output());
}

template <class Recipe, class Boundary>
void step(Boundary boundary) {
  tequant::quantization_manager<Recipe, Boundary, tequant::stacked_recompute> m({}, std::move(boundary));
  const std::vector<float> x(128 * 128, 1.0f);
  const auto h = m.register_module("linear");
  const auto forward = [&] {
    (void)m.module_forward(h);
    cast(m, m.slot(h, tequant::forward_role::input), x);
    cast(m, m.slot(h, tequant::forward_role::weight), x);
  };
  tequant::checkpoint_frame frame;
  {
    auto ac = m.autocast();
    auto f = m.checkpoint_forward(frame);
    forward();
  }
  {
    auto r = m.checkpoint_replay(frame);
    forward();
  }
  cast(m, m.slot(h, tequant::backward_role::grad_output), x);
  m.request_backward_update();
  m.flush_backward_update();
  tequant::load_state(m, tequant::state_bytes(m));
}

template <class Recipe>
void every_boundary() {
  step<Recipe>(tequant::engine_callback<hooks>{hooks{}});
  step<Recipe>(tequant::autocast_entry{});
  step<Recipe>(tequant::explicit_scope{});
  step<Recipe>(tequant::first_module_owner{});
}

}  // namespace

void sixteen_managers() {
  every_boundary<tequant::delayed_scaling<>>();
  every_boundary<tequant::current_scaling>();
  every_boundary<tequant::mxfp8_scaling>();
  every_boundary<tequant::block_scaling>();
}
