// SPDX-License-Identifier: Apache-2.0
// A C++ re-implementation of TransformerEngine's delayed-scaling bookkeeping (te-semantics §3-§5),
// used only as the "TE-style" baseline of bench_policies. It is NOT part of the library.
//
// What it reproduces, per te-semantics:
//  - per module and direction an fp32 scale [n] and an amax history [L, n] (row 0 = staging, rows
//    1..L-1 oldest -> newest); casts max-accumulate into row 0 (§3.1, §3.2);
//  - one-shot registration into global buffers keyed by "<dir>_recipe=<repr>,group=None" (§3.3);
//  - autocast enter/exit with the per-entry autocast_arguments insert, the depth-0 ownership reset and
//    the forward update at the outermost exit (§4.2);
//  - first-module ownership: the first module forward consumes the flag, its backward runs the
//    backward update (§4.3);
//  - the update: concatenate row 0 of every history of the bucket, (no-op) all-reduce, then the fused
//    roll-based update of every [L, n] history with the zero skip (§3.4, §3.5);
//  - recompute: phase 1 pushes clones of the whole forward history and scale onto a per-module FIFO;
//    phase 2 clones the live state ("updated"), pops the stash, copies it in, runs the forward and
//    copies the "updated" clones back at end_forward (§5.3).
// Deliberate choice: update counts are those of the FIXED TE (one forward and one backward update per
// step, no extra owners during replay). TE main with per-layer checkpoints runs more updates (bug B,
// te-semantics §7), so this baseline is the conservative one to compare against.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tequant/format/bits.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/format/fp8.hpp"

namespace te_style {

/// DelayedScalingRecipeState of one module and one direction.
struct recipe_state {
  std::uint32_t n = 0, L = 0;
  std::vector<float> scale;         // [n], initialised to 1
  std::vector<float> amax_history;  // [L, n], row-major, initialised to 0

  recipe_state() = default;
  recipe_state(std::uint32_t n_, std::uint32_t L_)
      : n(n_), L(L_), scale(n_, 1.0f), amax_history(static_cast<std::size_t>(n_) * L_, 0.0f) {}
  float* staging(std::uint32_t j) noexcept { return amax_history.data() + j; }  // row 0, column j
};

struct module_meta {
  std::string name;
  recipe_state fwd, bwd;
  bool registered = false;       // fp8_meta["buffer_index_and_autocast_key"] exists
  int recompute_pos = -1;        // fp8_meta["global_fp8_buffer_pos_fwd_recompute"]
  std::vector<float> updated_history, updated_scale;  // fp8_meta["updated_*_fwd"] during a replay
  bool ctx_owner = false;        // ctx.reduce_and_update_bwd_fp8_tensors
};

/// The global buffers of one key (§3.3): parallel lists of views.
struct global_bucket {
  tequant::direction dir;
  std::vector<recipe_state*> states;
};

/// FP8GlobalStateManager plus the module-side code paths that touch it.
class state_manager {
 public:
  state_manager(std::uint32_t history_length, float fwd_scaled_max, float bwd_scaled_max, bool stateful)
      : L_(history_length), fwd_sm_(fwd_scaled_max), bwd_sm_(bwd_scaled_max), stateful_(stateful),
        recipe_repr_("DelayedScaling(margin=0, format=HYBRID, amax_history_len=" + std::to_string(history_length) +
                     ", reduce_amax=True)") {}

  std::uint32_t add_module(std::string name, std::uint32_t num_gemms) {
    module_meta m;
    m.name = std::move(name);
    if (stateful_) {
      m.fwd = recipe_state(3 * num_gemms, L_);
      m.bwd = recipe_state(2 * num_gemms, L_);
    }
    modules_.push_back(std::move(m));
    return static_cast<std::uint32_t>(modules_.size() - 1);
  }
  module_meta& module(std::uint32_t i) noexcept { return modules_[i]; }

  // ---- autocast (§4.2) ----
  struct autocast_snapshot {
    bool enabled, is_first;
  };
  autocast_snapshot autocast_enter() {
    const autocast_snapshot snap{enabled_, is_first_};
    if (stateful_) autocast_arguments_[recipe_repr_] = 1;  // autocast_arguments[key] = (recipe, group)
    enabled_ = true;
    if (depth_ == 0) is_first_ = true;
    ++depth_;
    return snap;
  }
  void autocast_exit(autocast_snapshot snap, bool grad_enabled) {
    enabled_ = snap.enabled;
    is_first_ = snap.is_first;
    --depth_;
    if (depth_ == 0 && grad_enabled && !recompute_phase_) reduce_and_update(tequant::direction::forward);
  }

  // ---- recompute flags (§5.1) ----
  void set_recompute(bool region, bool phase) noexcept {
    recompute_region_ = region;
    recompute_phase_ = phase;
  }

  // ---- module forward (prepare_forward / end_forward) ----
  void prepare_forward(std::uint32_t i, bool training = true) {
    module_meta& m = modules_[i];
    if (stateful_ && recompute_phase_) {
      get_old_fp8_meta_tensors_for_recompute(m);
      return;  // phase 2 skips the normal path
    }
    if (stateful_ && !m.registered) add_fp8_tensors_to_global_buffer(m);
    if (stateful_ && training && recompute_region_) copy_forward_fp8_meta_tensors_for_recompute(m);
    m.ctx_owner = is_first_;  // is_first_fp8_module(): consume once
    is_first_ = false;
  }
  void end_forward(std::uint32_t i) {
    if (stateful_ && recompute_phase_) restore_fp8_meta_tensors(modules_[i]);
  }
  /// The end of a module's backward: the owner runs the backward update.
  void end_backward(std::uint32_t i) {
    if (modules_[i].ctx_owner) reduce_and_update(tequant::direction::backward);
  }

  /// Bytes held by outstanding stashes (the [L, n] history and [n] scale clones).
  std::size_t stash_bytes() const noexcept {
    std::size_t b = 0;
    for (const auto& q : recompute_buffer_)
      for (const auto& e : q) b += (e.first.size() + e.second.size()) * sizeof(float);
    return b;
  }
  std::size_t outstanding_stashes() const noexcept {
    std::size_t c = 0;
    for (const auto& q : recompute_buffer_) c += q.size();
    return c;
  }
  /// Updates run so far in direction `d`.
  std::uint64_t updates(tequant::direction d) const noexcept { return updates_[d == tequant::direction::forward ? 0 : 1]; }

 private:
  void add_fp8_tensors_to_global_buffer(module_meta& m) {
    for (const auto dir : {tequant::direction::forward, tequant::direction::backward}) {
      std::string key = std::string(dir == tequant::direction::forward ? "forward" : "backward") + "_recipe=" +
                        recipe_repr_ + ",group=None";
      auto it = buffers_.find(key);
      if (it == buffers_.end()) it = buffers_.emplace(std::move(key), global_bucket{dir, {}}).first;
      it->second.states.push_back(dir == tequant::direction::forward ? &m.fwd : &m.bwd);
    }
    m.registered = true;
  }

  void copy_forward_fp8_meta_tensors_for_recompute(module_meta& m) {
    if (m.recompute_pos < 0) {
      m.recompute_pos = static_cast<int>(recompute_buffer_.size());
      recompute_buffer_.emplace_back();
    }
    recompute_buffer_[static_cast<std::size_t>(m.recompute_pos)].emplace_back(m.fwd.amax_history, m.fwd.scale);
  }

  void get_old_fp8_meta_tensors_for_recompute(module_meta& m) {
    // clones of the live state (#1723), then popleft and copy_ into the live tensors
    m.updated_history = std::vector<float>(m.fwd.amax_history);
    m.updated_scale = std::vector<float>(m.fwd.scale);
    auto& q = recompute_buffer_.at(static_cast<std::size_t>(m.recompute_pos));
    auto stashed = std::move(q.front());
    q.pop_front();
    std::copy(stashed.first.begin(), stashed.first.end(), m.fwd.amax_history.begin());
    std::copy(stashed.second.begin(), stashed.second.end(), m.fwd.scale.begin());
  }

  void restore_fp8_meta_tensors(module_meta& m) {
    std::copy(m.updated_history.begin(), m.updated_history.end(), m.fwd.amax_history.begin());
    std::copy(m.updated_scale.begin(), m.updated_scale.end(), m.fwd.scale.begin());
  }

  // reduce_and_update_fp8_tensors(forward) (§3.4) with the fused kernel's per-column semantics (§3.5).
  void reduce_and_update(tequant::direction dir) {
    if (!stateful_) return;
    ++updates_[dir == tequant::direction::forward ? 0 : 1];
    const float sm = dir == tequant::direction::forward ? fwd_sm_ : bwd_sm_;
    for (auto& [key, bucket] : buffers_) {
      if (bucket.dir != dir || bucket.states.empty()) continue;
      // torch.cat of the row-0 views: a fresh contiguous buffer
      std::size_t total = 0;
      for (const recipe_state* s : bucket.states) total += s->n;
      std::vector<float> buf(total);
      std::size_t off = 0;
      for (const recipe_state* s : bucket.states) {
        std::copy(s->amax_history.begin(), s->amax_history.begin() + s->n, buf.begin() + static_cast<std::ptrdiff_t>(off));
        off += s->n;
      }
      // all_reduce(buf, MAX): a single process has nothing to reduce
      off = 0;
      for (recipe_state* s : bucket.states) {
        fused_update(*s, buf.data() + off, sm);
        off += s->n;
      }
    }
  }

  static void fused_update(recipe_state& st, const float* reduced, float scaled_max) {
    const std::uint32_t n = st.n, L = st.L;
    float* H = st.amax_history.data();
    for (std::uint32_t j = 0; j < n; ++j) {
      const float c = reduced[j];
      if (c == 0.0f) continue;  // not used this window: no roll, scale kept
      float a = c;              // algo "max": c and the L-1 completed windows, NaN ignored
      if (L == 1) {
        H[j] = 0.0f;
      } else {
        a = tequant::detail::nan_ignoring_max(a, H[n + j]);  // row 1, evicted by the roll
        for (std::uint32_t r = 1; r + 1 < L; ++r) {
          const float v = H[static_cast<std::size_t>(r + 1) * n + j];
          H[static_cast<std::size_t>(r) * n + j] = v;
          a = tequant::detail::nan_ignoring_max(a, v);
        }
        H[static_cast<std::size_t>(L - 1) * n + j] = c;
        H[j] = 0.0f;
      }
      float s = st.scale[j];
      if (tequant::detail::is_finite(a) && a > 0.0f) s = scaled_max / a;
      if (tequant::detail::is_inf(s)) s = tequant::detail::float_max;
      st.scale[j] = s;
    }
  }

  std::uint32_t L_;
  float fwd_sm_, bwd_sm_;
  bool stateful_;
  std::string recipe_repr_;
  std::vector<module_meta> modules_;
  std::unordered_map<std::string, global_bucket> buffers_;
  std::unordered_map<std::string, int> autocast_arguments_;
  std::vector<std::deque<std::pair<std::vector<float>, std::vector<float>>>> recompute_buffer_;
  bool enabled_ = false, is_first_ = false, recompute_region_ = false, recompute_phase_ = false;
  int depth_ = 0;
  std::uint64_t updates_[2] = {0, 0};
};

}  // namespace te_style
