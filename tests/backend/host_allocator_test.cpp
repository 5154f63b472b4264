// SPDX-License-Identifier: Apache-2.0
// host_backend's buffers: zeroed, movable, and (Linux) large ones 2 MiB-aligned for huge pages.
#include <doctest/doctest.h>

#include <cstdint>
#include <utility>

#include "tequant/backend/host.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace {

using alloc = tequant::host_allocator<float>;

bool all_zero(const float* p, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i)
    if (p[i] != 0.0f) return false;
  return true;
}

}  // namespace

TEST_CASE("host buffers below and above the huge-page threshold are zeroed and usable") {
  const tequant::host_backend backend;
  const std::size_t big = alloc::huge_page_threshold / sizeof(float) + 123;  // not a whole huge page
  for (std::size_t n : {std::size_t{1}, std::size_t{1000}, alloc::huge_page_threshold / sizeof(float) - 1, big}) {
    CAPTURE(n);
    auto b = backend.make_buffer<float>(n);
    REQUIRE(b.size() == n);
    CHECK(all_zero(b.data(), n));
    b[n - 1] = 3.0f;  // the last element is inside the block
    auto moved = std::move(b);
    CHECK(moved[n - 1] == 3.0f);
#if defined(__linux__)
    CHECK(alloc::on_huge_pages(n * sizeof(float)) == (n * sizeof(float) >= alloc::huge_page_threshold));
#else
    CHECK(!alloc::on_huge_pages(n * sizeof(float)));
#endif
    if (alloc::on_huge_pages(n * sizeof(float)))
      CHECK(reinterpret_cast<std::uintptr_t>(moved.data()) % alloc::huge_page_size == 0);
  }
}

TEST_CASE("a delayed bucket whose ring grows past the huge-page threshold keeps its state") {
  // L = 1024, capacity doubling: 500 slots hold 512 (ring and window 2 MiB each, ordinary pages);
  // slot 513 grows them to 1,024 (4 MiB, huge pages) and slot 1,025 to 2,048, each growth a copy of
  // the state the first update left.
  tequant::delayed_bucket<tequant::host_backend> b(1024);
  for (std::uint32_t j = 0; j < 500; ++j) b.add_slot();
  for (std::uint32_t j = 0; j < 500; ++j) b.staging()[j] = 1.0f + static_cast<float>(j);
  b.update(tequant::window_max{}, {448.0f});
  CHECK(!alloc::on_huge_pages(512 * std::size_t{1024} * sizeof(float)));
  for (std::uint32_t j = 500; j < 1100; ++j) b.add_slot();
  if (alloc::on_huge_pages(2048 * std::size_t{1024} * sizeof(float)))
    CHECK(reinterpret_cast<std::uintptr_t>(b.view().ring) % alloc::huge_page_size == 0);
  for (std::uint32_t j = 0; j < 1100; ++j) b.staging()[j] = 0.5f;
  b.update(tequant::window_max{}, {448.0f});
  for (std::uint32_t j = 0; j < 500; ++j) REQUIRE(b.scale(j) == 448.0f / (1.0f + static_cast<float>(j)));
  for (std::uint32_t j = 500; j < 1100; ++j) REQUIRE(b.scale(j) == 448.0f / 0.5f);
}
