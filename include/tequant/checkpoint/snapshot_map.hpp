// SPDX-License-Identifier: Apache-2.0
// A checkpoint frame's snapshot: (slot key -> scale) in flat storage that keeps its capacity.
#pragma once
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "tequant/config.hpp"

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

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }

  /// Position of `key` (its first-use order), or npos.
  TEQUANT_ALWAYS_INLINE std::size_t find(std::uint64_t key) noexcept {
    // A replay casts its slots in the order its original forward did: the entry after the last hit
    // is almost always the one asked for (one compare, inline); anything else searches out of line.
    const std::size_t h = hint_;
    if (h < size_ && entries_[h].key == key) [[likely]] {
      hint_ = h + 1;
      return h;
    }
    return find_slow(key);
  }

  float& value(std::size_t pos) noexcept { return entries_[pos].value; }
  std::uint64_t& rng_offset(std::size_t pos) noexcept { return entries_[pos].rng_offset; }

  /// Adds (key, v) unless `key` is present; returns whether it added. Strong guarantee: a failed
  /// allocation leaves the map as it was. Positions of existing entries never change; their
  /// addresses change only when the map grows.
  TEQUANT_ALWAYS_INLINE bool try_emplace(std::uint64_t key, float v, std::uint64_t rng_offset = 0) {
    const std::size_t n = size_;
    // A recording frame asks for keys it mostly does not hold yet: no hint to try first (find()'s
    // hint serves replays, which ask in recorded order). Without an index (a frame that never held
    // `index_threshold` entries; clear() keeps an index once built) and with room left (a reused frame
    // in steady state): a scan and a store, inline.
    if (n < fast_limit_) [[likely]] {
      entry* e = entries_.data();
      for (std::size_t i = 0; i < n; ++i)
        if (e[i].key == key) return false;
      e[n] = {key, v, rng_offset};
      size_ = n + 1;
      return true;
    }
    return try_emplace_slow(key, v, rng_offset);
  }

  /// Removes the entry added last (undoes a try_emplace whose follow-up failed).
  void pop_back() noexcept {
    if (size_ == 0) return;
    const std::size_t last = size_ - 1;
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
    size_ = last;
    hint_ = 0;
  }

  /// Forgets every entry, keeps the storage.
  void clear() noexcept {
    size_ = 0;
    std::fill(index_.begin(), index_.end(), std::uint32_t{0});
    hint_ = 0;
  }

 private:
  struct entry {
    std::uint64_t key;
    float value;
    std::uint64_t rng_offset;
  };

  [[gnu::noinline]] std::size_t find_slow(std::uint64_t key) noexcept {
    const std::size_t n = size_;
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

  [[gnu::noinline]] bool try_emplace_slow(std::uint64_t key, float v, std::uint64_t rng_offset) {
    const std::size_t n = size_;
    if (index_.empty()) {
      for (std::size_t i = 0; i < n; ++i)
        if (entries_[i].key == key) return false;
    } else if (find_indexed(key) != npos) {
      return false;
    }
    if (n == entries_.size()) entries_.resize(std::max(initial_capacity, 2 * n));
    if (n + 1 >= index_threshold && 2 * (n + 1) > index_.size()) rebuild_index(n + 1);
    entries_[n] = {key, v, rng_offset};
    size_ = n + 1;
    if (!index_.empty()) insert_index(key, n);
    update_fast_limit();
    return true;
  }

  // try_emplace's inline path holds while size_ < fast_limit_: no index, room left, and the next
  // entry still below index_threshold (one compare instead of three, one of them a division).
  void update_fast_limit() noexcept {
    fast_limit_ = index_.empty() ? std::min(entries_.size(), index_threshold - 1) : 0;
  }

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
    for (std::size_t i = 0; i < size_; ++i) insert_index(entries_[i].key, i);
  }

  std::vector<entry> entries_;  // storage: the first size_ are the entries, the rest room to grow into
  std::size_t size_ = 0;
  std::vector<std::uint32_t> index_;  // empty, or a power of two of cells holding position + 1 (0: free)
  std::size_t hint_ = 0;
  std::size_t fast_limit_ = 0;  // see update_fast_limit()
};

}  // namespace tequant::detail
