// SPDX-License-Identifier: Apache-2.0
// A checkpoint frame's snapshot: (slot key -> scale) in flat storage that keeps its capacity.
#pragma once
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace tequant::detail {

/// What a frame's original forward cast with, one entry per forward slot in first-use order: the scale
/// (or, on a device backend, the position of its copy in the frame's device buffer) and the random
/// number offset of a recipe that rounds stochastically.
/// A frame takes its snapshot once per step and is usually reused the next step, so clear() keeps the
/// storage: a reused frame allocates nothing in steady state, a fresh one allocates once for up to
/// `initial_capacity` slots (a node-based map allocated and freed once per slot per step). Small
/// snapshots are searched linearly; from `index_threshold` entries on, an open-addressing index keeps
/// lookups O(1) so that a frame around a whole model does not record in quadratic time.
class snapshot_map {
 public:
  static constexpr std::size_t npos = ~std::size_t{0};
  static constexpr std::size_t initial_capacity = 4;
  static constexpr std::size_t index_threshold = 16;

  std::size_t size() const noexcept { return entries_.size(); }
  bool empty() const noexcept { return entries_.empty(); }

  /// Position of `key` (its first-use order), or npos.
  std::size_t find(std::uint64_t key) noexcept {
    const std::size_t n = entries_.size();
    // A replay casts its slots in the order its original forward did: the entry after the last hit
    // is almost always the one asked for.
    if (hint_ < n && entries_[hint_].key == key) return hint_++;
    std::size_t pos = npos;
    if (index_.empty()) {
      for (std::size_t i = 0; i < n; ++i)
        if (entries_[i].key == key) {
          pos = i;
          break;
        }
    } else {
      pos = find_indexed(key);
    }
    if (pos != npos) hint_ = pos + 1;
    return pos;
  }

  float& value(std::size_t pos) noexcept { return entries_[pos].value; }
  std::uint64_t& rng_offset(std::size_t pos) noexcept { return entries_[pos].rng_offset; }

  /// Adds (key, v) unless `key` is present; returns whether it added. Strong guarantee: a failed
  /// allocation leaves the map as it was. Positions of existing entries never change; their
  /// addresses change only when the map grows.
  bool try_emplace(std::uint64_t key, float v, std::uint64_t rng_offset = 0) {
    const std::size_t n = entries_.size();
    // A recording frame asks for keys it mostly does not hold yet: no hint to try first (find()'s
    // hint serves replays, which ask in recorded order).
    if (index_.empty()) {
      for (std::size_t i = 0; i < n; ++i)
        if (entries_[i].key == key) return false;
    } else if (find_indexed(key) != npos) {
      return false;
    }
    if (n == entries_.capacity()) entries_.reserve(std::max(initial_capacity, 2 * n));
    if (n + 1 >= index_threshold && 2 * (n + 1) > index_.size()) rebuild_index(n + 1);
    entries_.push_back({key, v, rng_offset});  // cannot throw: room reserved above
    if (!index_.empty()) insert_index(key, n);
    return true;
  }

  /// Removes the entry added last (undoes a try_emplace whose follow-up failed).
  void pop_back() noexcept {
    if (entries_.empty()) return;
    const std::size_t last = entries_.size() - 1;
    if (!index_.empty()) {
      // Linear probing: no key added before the last one probed past its cell, so emptying the
      // cell keeps every other probe sequence intact.
      const std::size_t mask = index_.size() - 1;
      for (std::size_t h = hash(entries_[last].key, mask);; h = (h + 1) & mask)
        if (index_[h] == last + 1) {
          index_[h] = 0;
          break;
        }
    }
    entries_.pop_back();
    hint_ = 0;
  }

  /// Forgets every entry, keeps the storage.
  void clear() noexcept {
    entries_.clear();
    std::fill(index_.begin(), index_.end(), std::uint32_t{0});
    hint_ = 0;
  }

 private:
  struct entry {
    std::uint64_t key;
    float value;
    std::uint64_t rng_offset;
  };

  static std::size_t hash(std::uint64_t key, std::size_t mask) noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
  }

  // Position of `key` through the index (not empty), or npos.
  std::size_t find_indexed(std::uint64_t key) const noexcept {
    const std::size_t mask = index_.size() - 1;
    for (std::size_t h = hash(key, mask);; h = (h + 1) & mask) {
      const std::uint32_t e = index_[h];
      if (e == 0) return npos;
      if (entries_[e - 1].key == key) return e - 1;
    }
  }

  void insert_index(std::uint64_t key, std::size_t pos) noexcept {
    const std::size_t mask = index_.size() - 1;
    std::size_t h = hash(key, mask);
    while (index_[h] != 0) h = (h + 1) & mask;
    index_[h] = static_cast<std::uint32_t>(pos + 1);
  }

  // Room for `count` entries at a load factor of at most 1/2; built aside, then swapped in.
  void rebuild_index(std::size_t count) {
    std::vector<std::uint32_t> fresh(std::bit_ceil(std::max<std::size_t>(4 * count, 64)), 0);
    fresh.swap(index_);
    for (std::size_t i = 0; i < entries_.size(); ++i) insert_index(entries_[i].key, i);
  }

  std::vector<entry> entries_;
  std::vector<std::uint32_t> index_;  // empty, or a power of two of cells holding position + 1 (0: free)
  std::size_t hint_ = 0;
};

}  // namespace tequant::detail
