// SPDX-License-Identifier: Apache-2.0
// The registered modules and their slots, grouped in buckets: the one bucket rule, shared by the
// manager (registration, the cast path's checks, messages) and persistence (save, load, layout checks).
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tequant/comm/layout.hpp"
#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/manager_types.hpp"
#include "tequant/persistence/bytes.hpp"

namespace tequant {

/// One bucket: all slots of one (direction, reduction group).
struct bucket_info {
  direction dir = direction::forward;
  std::uint32_t group = 0;
  std::uint32_t slots = 0;
  std::vector<std::uint64_t> owners;  ///< per slot: module << 32 | role index (error messages, layout checks)
};

namespace detail {

/// Most slots a bucket may hold (4M tensor roles: far above any model). Registration refuses more, so
/// a state file that claims more is forged, and loading one never allocates more than 32 MiB of slots.
inline constexpr std::uint64_t max_bucket_slots = 1ull << 22;

/// Modules in registration order; each adds 3 forward slots (input, weight, output) and 2 backward
/// slots (grad_output, grad_input) per GEMM to the bucket of its (direction, group), creating the
/// bucket at first use. Buckets are numbered in creation order.
class slot_table {
 public:
  struct module_info {
    std::string name;
    std::uint32_t num_gemms;
    slot_id forward_base, backward_base;
  };
  /// An owner that no module claims: slots a failed registration left behind (their state exists).
  static constexpr std::uint64_t unowned = ~std::uint64_t{0};

  std::size_t module_count() const noexcept { return modules_.size(); }
  std::size_t bucket_count() const noexcept { return buckets_.size(); }
  std::span<const bucket_info> buckets() const noexcept { return buckets_; }
  std::span<const module_info> modules() const noexcept { return modules_; }
  /// The buckets of `dir` in ascending group order (the order of an update's collectives on every rank).
  std::span<const std::uint32_t> ordered(direction dir) const noexcept { return order_[static_cast<int>(dir)]; }

  /// Called on every module_forward: the message is built out of line (require's arguments would be
  /// evaluated on every call).
  const module_info& module(module_handle m, const char* where) const {
    if (m.index >= module_count_) [[unlikely]]
      bad_module(m, where);
    return modules_[m.index];
  }
  template <class = void>  // instantiated where used: a TU that never calls it does not pay for it
  const bucket_info& bucket(std::uint32_t b) const {
    require(b < buckets_.size(), "bucket: index ", b, " out of range (", buckets_.size(), " buckets)");
    return buckets_[b];
  }

  /// The bucket of (dir, group), or bucket_count() when it does not exist yet.
  std::uint32_t find(direction dir, std::uint32_t group) const noexcept {
    std::uint32_t b = 0;
    while (b < buckets_.size() && !(buckets_[b].dir == dir && buckets_[b].group == group)) ++b;
    return b;
  }

  // ---- registration -----------------------------------------------------------------------------

  /// Registers a module by the rule above. `state` keeps per-bucket state in step: state.add_bucket()
  /// right after a bucket is created, state.add_slot(b) before each slot is added to bucket b. Either
  /// may throw: a new bucket whose state failed is removed; slots whose state was added before a
  /// failure stay, unowned, so that table and state always agree on every bucket's size.
  template <class State>
  module_handle register_module(std::string name, std::uint32_t num_gemms, reduction_groups groups, State&& state) {
    // Room first, so that no step below throws on the table's side.
    modules_.reserve(modules_.size() + 1);
    buckets_.reserve(buckets_.size() + 2);
    for (auto& l : limit_) l.reserve(buckets_.size() + 2);
    for (auto& o : order_) o.reserve(o.size() + 1);
    const std::uint32_t count[2] = {3 * num_gemms, 2 * num_gemms};
    const std::uint32_t group[2] = {groups.forward, groups.backward};
    for (int d = 0; d < 2; ++d) {
      const std::uint32_t b = find(static_cast<direction>(d), group[d]);
      if (b < buckets_.size()) buckets_[b].owners.reserve(buckets_[b].owners.size() + count[d]);
    }
    for (int d = 0; d < 2; ++d) {
      const std::uint32_t b = find(static_cast<direction>(d), group[d]);
      const std::uint64_t have = b < buckets_.size() ? buckets_[b].slots : 0;
      require(have + count[d] <= max_bucket_slots, "register_module('", name, "'): the ", to_string(static_cast<direction>(d)),
              " bucket of group ", group[d], " would hold ", have + count[d], " slots (at most ", max_bucket_slots, ")");
    }
    const auto module = static_cast<std::uint64_t>(modules_.size());
    slot_id base[2];
    for (int d = 0; d < 2; ++d) {
      const auto dir = static_cast<direction>(d);
      std::uint32_t b = find(dir, group[d]);
      if (b == buckets_.size()) {
        bucket_info info{dir, group[d], 0, {}};
        info.owners.reserve(count[d]);
        buckets_.push_back(std::move(info));
        for (auto& l : limit_) l.push_back(0);
        auto& order = order_[d];
        auto at = order.begin();  // after the buckets of lower or equal groups (reserved: no allocation)
        while (at != order.end() && buckets_[*at].group <= group[d]) ++at;
        at = order.insert(at, b);
        bucket_count_ = static_cast<std::uint32_t>(buckets_.size());
        try {
          state.add_bucket();
        } catch (...) {
          order.erase(at);
          buckets_.pop_back();
          for (auto& l : limit_) l.pop_back();
          bucket_count_ = static_cast<std::uint32_t>(buckets_.size());
          if (d == 1) disown(base[0], count[0]);
          throw;
        }
      }
      base[d] = {dir, b, buckets_[b].slots};
      for (std::uint32_t k = 0; k < count[d]; ++k) {
        try {
          state.add_slot(b);
        } catch (...) {
          if (d == 1) disown(base[0], count[0]);
          disown(base[d], k);
          throw;
        }
        buckets_[b].owners.push_back((module << 32) | k);
        ++buckets_[b].slots;
        ++limit_[d][b];
        ++total_[static_cast<std::size_t>(d)];
      }
    }
    modules_.push_back({std::move(name), num_gemms, base[0], base[1]});
    module_count_ = static_cast<std::uint32_t>(modules_.size());
    return {static_cast<std::uint32_t>(module)};
  }

  // ---- slots -------------------------------------------------------------------------------------

  slot_id slot(module_handle m, forward_role role, std::uint32_t gemm) const {
    const module_info& info = module(m, "slot");
    check_gemm(info, gemm);
    slot_id s = info.forward_base;
    s.index += 3 * gemm + static_cast<std::uint32_t>(role);
    return s;
  }
  slot_id slot(module_handle m, backward_role role, std::uint32_t gemm) const {
    const module_info& info = module(m, "slot");
    check_gemm(info, gemm);
    slot_id s = info.backward_base;
    s.index += 2 * gemm + static_cast<std::uint32_t>(role);
    return s;
  }

  /// The cast path's check that `s` belongs to this table: its direction picks a dense array of
  /// per-bucket slot counts (0 for the other direction's buckets), then one compare on the bucket and
  /// one on the index; the message is out of line.
  void check(slot_id s, const char* where) const {
    if (s.dir == direction::forward)
      check_in<direction::forward>(s, where);
    else if (s.dir == direction::backward)
      check_in<direction::backward>(s, where);
    else [[unlikely]]
      bad_slot(s.dir, s.bucket, s.index, where);
  }
  /// The same where the caller expects direction D (plan_cast branches on the direction first, so
  /// there the direction compare folds away): the bucket and the index, two compares.
  template <direction D>
  TEQUANT_ALWAYS_INLINE void check_in(slot_id s, const char* where) const {
    // The fields go to the message one by one: passing the struct made the cast path spill it.
    if (s.dir != D || s.bucket >= bucket_count_ || s.index >= limit_[static_cast<int>(D)].data()[s.bucket])
        [[unlikely]]
      bad_slot(s.dir, s.bucket, s.index, where);
  }

  /// "'module'.role[gemm N]", for messages.
  template <class = void>  // instantiated where used: a TU that never calls it does not pay for it
  std::string describe(slot_id s) const {
    const std::uint64_t owner = buckets_[s.bucket].owners[s.index];
    if (owner == unowned) return "(a slot of a module whose registration failed)";
    const auto module = static_cast<std::uint32_t>(owner >> 32);
    const auto k = static_cast<std::uint32_t>(owner);
    std::string r = "'" + modules_[module].name + "'.";
    if (s.dir == direction::forward)
      r += std::string(to_string(static_cast<forward_role>(k % 3))) + "[gemm " + std::to_string(k / 3) + "]";
    else
      r += std::string(to_string(static_cast<backward_role>(k % 2))) + "[gemm " + std::to_string(k / 2) + "]";
    return r;
  }

  std::size_t slots(direction dir) const noexcept {
    return total_[static_cast<std::size_t>(dir)];
  }

  /// What this rank believes the bucket of (dir, group) holds (comm/layout.hpp), or count 0.
  template <class = void>  // instantiated where used: a TU that never calls it does not pay for it
  std::size_t signature(direction dir, std::uint32_t group, bucket_signature& sig, std::string& name) const {
    const std::uint32_t b = find(dir, group);
    if (b == buckets_.size() || buckets_[b].slots == 0) return 0;
    name = std::string(to_string(dir)) + " bucket of group " + std::to_string(group);
    std::uint64_t h = fnv_offset;
    for (const std::uint64_t owner : buckets_[b].owners)
      h = owner == unowned ? fnv1a(h, owner) : fnv1a(fnv1a(h, modules_[owner >> 32].name), owner & 0xFFFFFFFFu);
    sig = {name, buckets_[b].slots, h};
    return 1;
  }

  // ---- persistence -------------------------------------------------------------------------------

  /// The modules (name, GEMMs, groups) in order; the buckets follow from them by the rule above, and
  /// their table is written too so that a reader can check both agree.
  template <class = void>  // instantiated where used: a TU that never calls it does not pay for it
  void save(byte_writer& w) const {
    w.u32(static_cast<std::uint32_t>(modules_.size()));
    for (const module_info& m : modules_) {
      w.str(m.name);
      w.u32(m.num_gemms);
      w.u32(buckets_[m.forward_base.bucket].group);
      w.u32(buckets_[m.backward_base.bucket].group);
    }
    w.u32(static_cast<std::uint32_t>(buckets_.size()));
    for (const bucket_info& b : buckets_) {
      w.u8(static_cast<std::uint8_t>(b.dir));
      w.u32(b.group);
      w.u32(b.slots);
    }
  }

  /// Reads what save() wrote and rebuilds the table by registering its modules in order (the one
  /// bucket rule); a bucket table that disagrees with that is malformed.
  template <class = void>  // instantiated where used: a TU that never calls it does not pay for it
  static slot_table load(byte_reader& r) {
    slot_table t;
    const std::size_t n = r.count("module count", 16);
    for (std::size_t i = 0; i < n; ++i) {
      std::string name = r.str("module name");
      const std::uint32_t gemms = r.u32();
      const reduction_groups groups{r.u32(), r.u32()};
      if (gemms == 0 || gemms > max_bucket_slots / 3) r.malformed("module '", name, "' has ", gemms, " GEMMs");
      for (int d = 0; d < 2; ++d) {
        const std::uint32_t b = t.find(static_cast<direction>(d), d == 0 ? groups.forward : groups.backward);
        const std::uint64_t have = b < t.buckets_.size() ? t.buckets_[b].slots : 0;
        if (have + (d == 0 ? 3ull : 2ull) * gemms > max_bucket_slots)
          r.malformed("module '", name, "' takes a bucket past ", max_bucket_slots, " slots");
      }
      (void)t.register_module(std::move(name), gemms, groups, no_state{});
    }
    const std::size_t nb = r.count("bucket count", 9);
    if (nb != t.buckets_.size())
      r.malformed("the file lists ", nb, " buckets, its ", n, " modules build ", t.buckets_.size());
    for (const bucket_info& b : t.buckets_) {
      const std::uint8_t d = r.u8();
      if (d > 1) r.malformed("bucket direction ", unsigned{d});
      const std::uint32_t group = r.u32(), slots = r.u32();
      if (static_cast<direction>(d) != b.dir || group != b.group || slots != b.slots)
        r.malformed("the bucket table does not match the one its ", n, " modules build");
    }
    return t;
  }

  /// Whether `other` registered the same modules (names, GEMM counts, groups) in the same order;
  /// otherwise a message naming the first difference.
  template <class = void>  // instantiated where used: a TU that never calls it does not pay for it
  std::string layout_difference(const slot_table& other) const {
    if (modules_.size() != other.modules_.size())
      return "the file has " + std::to_string(other.modules_.size()) + " modules, this manager registered " +
             std::to_string(modules_.size());
    for (std::size_t i = 0; i < modules_.size(); ++i) {
      const module_info &a = modules_[i], &b = other.modules_[i];
      const auto groups = [](const slot_table& t, const module_info& m) {
        return std::to_string(t.buckets_[m.forward_base.bucket].group) + "/" +
               std::to_string(t.buckets_[m.backward_base.bucket].group);
      };
      if (a.name != b.name || a.num_gemms != b.num_gemms || groups(*this, a) != groups(other, b))
        return "module " + std::to_string(i) + " is '" + b.name + "' (" + std::to_string(b.num_gemms) + " GEMMs, groups " +
               groups(other, b) + ") in the file, '" + a.name + "' (" + std::to_string(a.num_gemms) + " GEMMs, groups " +
               groups(*this, a) + ") in this manager";
    }
    return {};
  }

  void swap(slot_table& o) noexcept {
    modules_.swap(o.modules_);
    buckets_.swap(o.buckets_);
    limit_[0].swap(o.limit_[0]);
    limit_[1].swap(o.limit_[1]);
    order_[0].swap(o.order_[0]);
    order_[1].swap(o.order_[1]);
    std::swap(bucket_count_, o.bucket_count_);
    std::swap(module_count_, o.module_count_);
    std::swap(total_, o.total_);
  }

 private:
  template <class = void>  // instantiated where used: a TU that never calls it does not pay for it
  static void check_gemm(const module_info& info, std::uint32_t gemm) {
    require(gemm < info.num_gemms, "slot: module '", info.name, "' has ", info.num_gemms, " GEMMs, asked for ", gemm);
  }

  [[noreturn, gnu::noinline, gnu::cold]] void bad_module(module_handle m, const char* where) const {
    fail(where, ": module handle ", m.index, " is not registered (", modules_.size(), " modules)");
  }

  [[noreturn, gnu::noinline, gnu::cold]] static void bad_slot(direction dir, std::uint32_t bucket, std::uint32_t index,
                                                             const char* where) {
    fail(where, ": slot (", to_string(dir), ", bucket ", bucket, ", index ", index, ") does not belong to this manager");
  }

  struct no_state {
    void add_bucket() noexcept {}
    void add_slot(std::uint32_t) noexcept {}
  };

  // Slots [base, base + count) of base's bucket no longer belong to a module.
  void disown(slot_id base, std::uint32_t count) noexcept {
    for (std::uint32_t k = 0; k < count; ++k) buckets_[base.bucket].owners[base.index + k] = unowned;
  }

  std::vector<module_info> modules_;
  std::vector<bucket_info> buckets_;
  // What the cast path's check reads, densely: per direction, each bucket's slot count if the bucket
  // is of that direction, else 0 (so an index of the wrong direction fails the one index compare).
  std::vector<std::uint32_t> limit_[2];
  std::vector<std::uint32_t> order_[2];  // per direction: its buckets in ascending group order (ordered())
  std::uint32_t bucket_count_ = 0;  // buckets_.size(), so that the bounds check is one compare
  std::uint32_t module_count_ = 0;  // modules_.size() (< 2^32: the manager refuses more), the same for modules
  std::array<std::size_t, 2> total_{};  // slots per direction (what a frame stack sizes snapshots by)
};

}  // namespace detail
}  // namespace tequant
