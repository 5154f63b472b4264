// SPDX-License-Identifier: Apache-2.0
// A manager's recipe part: the params and, for a stateful recipe, one state per bucket; the cast plan
// of a slot; the reduce-then-update step of a direction. Everything goes through the recipe concept.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tequant/cast_plan.hpp"
#include "tequant/comm/layout.hpp"
#include "tequant/config.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/persistence/bytes.hpp"
#include "tequant/recipe/concepts.hpp"
#include "tequant/slot_table.hpp"

namespace tequant {

namespace detail {

template <class R, class Backend>
inline constexpr bool has_state = requires { typename R::template state_for<Backend>; };

/// The non-empty buckets of one direction, as a range of their states (what a recipe's update sees),
/// in ascending group order (`order`: the slot table's list of that direction's buckets).
template <class S>
class direction_buckets {
 public:
  direction_buckets(std::span<S> states, std::span<const bucket_info> infos, std::span<const std::uint32_t> order) noexcept
      : states_(states), infos_(infos), order_(order) {}

  class iterator {
   public:
    using value_type = S;
    using difference_type = std::ptrdiff_t;
    iterator() = default;
    iterator(const direction_buckets* r, std::size_t i) noexcept : r_(r), i_(i) { skip(); }
    S& operator*() const noexcept { return r_->states_[r_->order_[i_]]; }
    iterator& operator++() noexcept {
      ++i_;
      skip();
      return *this;
    }
    iterator operator++(int) noexcept {
      iterator t = *this;
      ++*this;
      return t;
    }
    friend bool operator==(const iterator& a, const iterator& b) noexcept { return a.i_ == b.i_; }

   private:
    void skip() noexcept {
      while (i_ < r_->order_.size() && r_->infos_[r_->order_[i_]].slots == 0) ++i_;
    }
    const direction_buckets* r_ = nullptr;
    std::size_t i_ = 0;
  };

  iterator begin() const noexcept { return {this, 0}; }
  iterator end() const noexcept { return {this, order_.size()}; }

 private:
  std::span<S> states_;
  std::span<const bucket_info> infos_;
  std::span<const std::uint32_t> order_;
};

/// Distributed comms (mpi_comm, nccl_comm) can check, with one small collective per group, that every
/// rank built the same buckets of `dir` before the all-reduces rely on it (comm/layout.hpp). It runs at
/// every update while enabled: a rank-local "layout changed" flag could itself differ between ranks and
/// desynchronise the collectives. Every group of the comm is checked, in order, on every rank.
template <class Comm>
void verify_layout(Comm& comm, const slot_table& table, direction dir) {
  if constexpr (requires(Comm& c) {
                  { c.layout_check_enabled() } -> std::convertible_to<bool>;
                  { c.groups() } -> std::convertible_to<std::uint32_t>;
                }) {
    if (!comm.layout_check_enabled()) return;
    const std::uint32_t groups = comm.groups();
    const std::uint64_t extra[] = {groups};
    for (std::uint32_t g = 0; g < groups; ++g) {
      std::string name;
      bucket_signature sig{};
      const std::size_t n = table.signature(dir, g, sig, name);
      verify_layout(comm, g, std::span<const bucket_signature>(&sig, n), extra);
    }
  }
}

}  // namespace detail

/// The recipe part of a manager with backend `Backend`. Stateless recipes keep only their params.
template <class R, class Backend, bool Stateful = detail::has_state<R, Backend>>
class bucket_states {
 public:
  using params_type = typename R::params_type;
  using state_type = typename R::template state_for<Backend>;
  /// One state per bucket, indexed like the slot table's buckets.
  using container = std::vector<state_type>;
  static constexpr bool stateful = true;
  /// Whether plan(slot) may be kept until the state moves (the recipe declares `stable_plans`).
  static constexpr bool stable_plans = requires { requires R::stable_plans; };

  explicit bucket_states(params_type p) : params_(std::move(p)) {}

  const params_type& params() const noexcept { return params_; }
  container& states() noexcept { return states_; }
  const container& states() const noexcept { return states_; }

  /// The table's state hook for one registration (slot_table::register_module).
  struct registration {
    bucket_states& self;
    const Backend& backend;
    void add_bucket() { self.states_.push_back(R::make_state(self.params_, backend)); }
    void add_slot(std::uint32_t b) { R::add_slot(self.states_[b]); }
  };
  registration registering(const Backend& backend) noexcept { return {*this, backend}; }

  cast_plan plan(slot_id slot) { return R::plan(params_, states_[slot.bucket], slot); }

  /// Reduces every bucket of `dir` (all of them first, in ascending group order, so that a failing
  /// collective leaves nothing half updated: reducing twice is idempotent), then the recipe updates
  /// them. Returns the number of collectives.
  template <class Comm>
  std::uint64_t reduce_and_update(direction dir, const detail::slot_table& table, Comm& comm) {
    std::uint64_t collectives = 0;
    if (R::reduces_amax(params_)) {
      detail::verify_layout(comm, table, dir);
      // Ascending group order (the table keeps each direction's list), not creation order: ranks that
      // first met modules of different groups in a different order must still enter the same
      // collectives in the same order. A direction has at most one bucket per group.
      const auto buckets = table.buckets();
      for (const std::uint32_t b : table.ordered(dir)) {
        if (buckets[b].slots == 0) continue;
        const std::span<float> staging = R::staging(states_[b]);
        comm.all_reduce_max(staging.data(), staging.size(), buckets[b].group);
        ++collectives;
      }
    }
    R::update(params_, dir, detail::direction_buckets<state_type>(states_, table.buckets(), table.ordered(dir)));
    return collectives;
  }

  float scale(slot_id s) const
    requires requires(const state_type& st) { R::scale(st, std::uint32_t{}); }
  {
    return R::scale(states_[s.bucket], s.index);
  }
  float staging_amax(slot_id s) const
    requires requires(const state_type& st) { R::staging_amax(st, std::uint32_t{}); }
  {
    return R::staging_amax(states_[s.bucket], s.index);
  }

  void save(detail::byte_writer& w) const {
    w.u32(static_cast<std::uint32_t>(states_.size()));
    for (const state_type& s : states_) R::save_state(s, w);
  }
  /// Reads what save() wrote: one state per bucket of `table`, each of its bucket's size.
  static container load(detail::byte_reader& r, const params_type& p, const detail::slot_table& table,
                        const Backend& backend) {
    const std::size_t n = r.count("bucket state count", 8);
    if (n != table.bucket_count()) r.malformed(n, " bucket states for ", table.bucket_count(), " buckets");
    return load_each(r, p, table, n, backend);
  }
  /// n states without a count in front (state files of version 1).
  static container load_each(detail::byte_reader& r, const params_type& p, const detail::slot_table& table,
                             std::size_t n, const Backend& backend) {
    container out;
    out.reserve(n);
    for (std::size_t b = 0; b < n; ++b) {
      out.push_back(R::load_state(r, p, backend));
      if (R::staging(out.back()).size() != table.buckets()[b].slots)
        r.malformed("bucket ", b, " state holds ", R::staging(out.back()).size(), " slots, the layout says ",
                    table.buckets()[b].slots);
    }
    return out;
  }
  void commit(container& loaded) noexcept { states_.swap(loaded); }

 private:
  params_type params_;
  container states_;
};

/// A stateless recipe: its params; plans follow from them and the slot.
template <class R, class Backend>
class bucket_states<R, Backend, false> {
 public:
  using params_type = typename R::params_type;
  /// Nothing per bucket (the manager's recipe_state() is empty).
  struct container {};
  static constexpr bool stateful = false;
  static constexpr bool stable_plans = true;  // a function of the params and the slot

  explicit bucket_states(params_type p) : params_(std::move(p)) {}

  const params_type& params() const noexcept { return params_; }
  container& states() noexcept { return empty_; }
  const container& states() const noexcept { return empty_; }

  struct registration {
    void add_bucket() noexcept {}
    void add_slot(std::uint32_t) noexcept {}
  };
  registration registering(const Backend&) noexcept { return {}; }

  cast_plan plan(slot_id slot) const noexcept { return R::plan(params_, slot); }

  template <class Comm>
  std::uint64_t reduce_and_update(direction, const detail::slot_table&, Comm&) noexcept {
    return 0;
  }

  void save(detail::byte_writer&) const noexcept {}
  static container load(detail::byte_reader&, const params_type&, const detail::slot_table&, const Backend&) noexcept {
    return {};
  }
  void commit(container&) noexcept {}

 private:
  params_type params_;
  TEQUANT_NO_UNIQUE_ADDRESS container empty_;
};

}  // namespace tequant
