// SPDX-License-Identifier: Apache-2.0
// Cross-rank check that every rank built the same buckets, before any amax all-reduce relies on it.
//
// A rank whose buckets differ from its peers' would enter an all-reduce of a different length (TE then
// hangs, or silently mixes amaxes of different tensors). The check exchanges only fixed-size messages,
// so every rank of a group reaches the same verdict after the same collectives, and on a mismatch every
// rank throws instead of some ranks blocking in a later collective.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tequant/error.hpp"

namespace tequant {

namespace detail {
#ifdef NDEBUG
inline constexpr bool layout_check_by_default = false;
#else
inline constexpr bool layout_check_by_default = true;
#endif

}  // namespace detail

/// Options of the distributed communicators (mpi_comm, nccl_comm).
struct comm_options {
  /// Before the amax all-reduces of an update, verify with one small extra collective per group that
  /// every rank has the same buckets (a mismatch raises `tequant::error` on every rank, never a hang).
  /// On by default in debug builds (NDEBUG not defined), like assert.
  bool check_layout = detail::layout_check_by_default;
};

/// What one rank believes one bucket of a group looks like. `name` is used only in messages.
struct bucket_signature {
  std::string_view name;  ///< e.g. "backward, group 1"
  std::uint64_t slots;    ///< number of slots (= all-reduce length)
  std::uint64_t hash;     ///< what the slots are: module names, roles, recipe parameters, in order
};

namespace detail {

/// FNV-1a: stable across processes and builds (std::hash is not required to be).
inline constexpr std::uint64_t fnv_offset = 14695981039346656037ull;
constexpr std::uint64_t fnv1a(std::uint64_t h, std::string_view bytes) noexcept {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}
constexpr std::uint64_t fnv1a(std::uint64_t h, std::uint64_t v) noexcept {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xffu;
    h *= 1099511628211ull;
  }
  return h;
}

/// Words {v..., ~v...} reduced with MAX give max(v) and ~min(v) in one collective.
template <class Comm>
void all_reduce_min_max(Comm& comm, std::vector<std::uint64_t>& words, std::uint32_t group) {
  const std::size_t n = words.size();
  words.resize(2 * n);
  for (std::size_t i = 0; i < n; ++i) words[n + i] = ~words[i];
  comm.all_reduce_max_u64(words.data(), words.size(), group);
  for (std::size_t i = 0; i < n; ++i) words[n + i] = ~words[n + i];  // now [max..., min...]
}

/// Collective over `group`: throws `tequant::error` on every rank of the group when the ranks' bucket
/// lists differ (count, slot counts or hashes). `extra` words (e.g. the number of groups) must agree too.
/// Costs one all-reduce of 2*(2+extra) words when the layouts agree, one more when they do not.
template <class Comm>
void verify_layout(Comm& comm, std::uint32_t group, std::span<const bucket_signature> buckets,
                   std::span<const std::uint64_t> extra = {}) {
  std::uint64_t combined = fnv_offset;
  for (const auto& b : buckets) combined = fnv1a(fnv1a(combined, b.slots), b.hash);
  std::vector<std::uint64_t> words{buckets.size(), combined};
  words.insert(words.end(), extra.begin(), extra.end());
  const std::size_t k = words.size();
  all_reduce_min_max(comm, words, group);
  bool same = true;
  for (std::size_t i = 0; i < k; ++i) same = same && words[i] == words[k + i];
  if (same) return;

  for (std::size_t i = 0; i < extra.size(); ++i) {
    if (words[2 + i] != words[k + 2 + i])
      fail("layout check (reduction group ", group, ", rank ", comm.rank(), "): setting #", i, " is ", extra[i],
           " on this rank but ranges over [", words[k + 2 + i], ", ", words[2 + i],
           "] across the group (every rank must construct its communicator with the same groups)");
  }
  // Every rank saw the same reduced words, so every rank is here: a second fixed-size exchange names
  // the first bucket that differs. Absent buckets read as all-ones.
  const std::uint64_t count = words[0];
  constexpr std::uint64_t absent = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::uint64_t> per(2 * count, absent);
  for (std::size_t i = 0; i < buckets.size(); ++i) {
    per[2 * i] = buckets[i].slots;
    per[2 * i + 1] = buckets[i].hash;
  }
  all_reduce_min_max(comm, per, group);
  const std::size_t m = 2 * count;
  const auto show = [&](std::uint64_t v) { return v == absent ? std::string("none") : std::to_string(v); };
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t max_slots = per[2 * i], min_slots = per[m + 2 * i];
    const std::uint64_t max_hash = per[2 * i + 1], min_hash = per[m + 2 * i + 1];
    if (max_slots == min_slots && max_hash == min_hash) continue;
    const bool here = i < buckets.size();
    const std::string what = here ? "bucket '" + std::string(buckets[i].name) + "'" : "bucket #" + std::to_string(i);
    const std::string local = here ? std::to_string(buckets[i].slots) + " slots" : "no such bucket";
    if (max_slots != min_slots)
      fail("layout check (reduction group ", group, ", rank ", comm.rank(), "): ", what, " (#", i, ") has ", local,
           " on this rank, but slot counts across the group range over [", show(min_slots), ", ", show(max_slots),
           "] ('none' = a rank without this bucket); every rank must register the same modules in the same order "
           "before the first update");
    fail("layout check (reduction group ", group, ", rank ", comm.rank(), "): ", what, " (#", i, ") has ", local,
         " on every rank, but the slots differ (module names, roles or order); every rank must register the same "
         "modules in the same order");
  }
  fail("layout check (reduction group ", group, ", rank ", comm.rank(), "): ", buckets.size(),
       " buckets on this rank, bucket counts across the group range over [", words[k], ", ", words[0], "]");
}

}  // namespace detail
}  // namespace tequant
