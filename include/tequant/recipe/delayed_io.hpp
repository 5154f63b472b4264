// SPDX-License-Identifier: Apache-2.0
// One delayed-scaling bucket in a state file: L, n, staging amaxes, scales, ring heads, rings. The
// monotonic window deque is not stored; it is a function of the ring and is rebuilt on load.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tequant/persistence/bytes.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace tequant::detail {

/// Writes the bucket (host-syncs on device backends).
template <class Backend>
void save_delayed_bucket(const delayed_bucket<Backend>& bucket, byte_writer& w) {
  auto& bk = const_cast<delayed_bucket<Backend>&>(bucket);  // view() is the read path; nothing is written
  const delayed_bucket_view v = bk.view();
  const std::size_t n = v.slots, rn = n * v.history_length;
  std::vector<float> f(rn > n ? rn : n);
  std::vector<std::uint32_t> u(n);
  w.u32(v.history_length);
  w.u32(v.slots);
  bk.backend().download(f.data(), v.staging, n);
  w.array32(std::span<const float>(f.data(), n));
  bk.backend().download(f.data(), v.scale, n);
  w.array32(std::span<const float>(f.data(), n));
  bk.backend().download(u.data(), v.ring_head, n);
  w.array32(std::span<const std::uint32_t>(u));
  bk.backend().download(f.data(), v.ring, rn);
  w.array32(std::span<const float>(f.data(), rn));
}

/// Reads a bucket written by save_delayed_bucket whose history length must be `L`. Everything is
/// parsed and checked before the (new) bucket is built, so a bad file allocates no more than it holds.
template <class Backend>
delayed_bucket<Backend> load_delayed_bucket(byte_reader& r, std::uint32_t L, const Backend& backend) {
  const std::uint32_t file_L = r.u32(), n = r.u32();
  if (file_L != L) r.malformed("a delayed-scaling bucket has history length ", file_L, ", the params say ", L);
  const std::size_t rn = static_cast<std::size_t>(n) * L;
  if (r.remaining() / 4 < 3 * static_cast<std::size_t>(n) + rn)
    r.malformed("a delayed-scaling bucket of ", n, " slots (history length ", L, ") runs past the payload");
  std::vector<float> staging(n), scale(n), ring(rn);
  std::vector<std::uint32_t> head(n), window(rn), front(n), wsize(n);
  r.array32(std::span<float>(staging));
  r.array32(std::span<float>(scale));
  r.array32(std::span<std::uint32_t>(head));
  for (const std::uint32_t x : head)
    if (x >= L) r.malformed("a delayed-scaling bucket's ring head ", x, " is outside [0, ", L, ")");
  r.array32(std::span<float>(ring));
  const delayed_bucket_view hv{n, L, staging.data(), scale.data(), ring.data(), head.data(), window.data(),
                               front.data(), wsize.data()};
  for (std::uint32_t j = 0; j < n; ++j) rebuild_window(hv, j);
  delayed_bucket<Backend> bk(L, backend);
  for (std::uint32_t j = 0; j < n; ++j) (void)bk.add_slot();
  const delayed_bucket_view dv = bk.view();
  auto& be = bk.backend();
  be.upload(dv.staging, staging.data(), n);
  be.upload(dv.scale, scale.data(), n);
  be.upload(dv.ring, ring.data(), rn);
  be.upload(dv.ring_head, head.data(), n);
  be.upload(dv.window, window.data(), rn);
  be.upload(dv.window_front, front.data(), n);
  be.upload(dv.window_size, wsize.data(), n);
  return bk;
}

}  // namespace tequant::detail
