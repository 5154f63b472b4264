// SPDX-License-Identifier: Apache-2.0
// The allocator of host_backend's buffers: large buffers on transparent huge pages.
//
// The delayed-scaling state keeps each slot's history ring and window on pages of their own at TE's
// default history length (1024 floats, 4 KiB a slot). An update touches one or two lines per slot,
// each on a different page: 20,000 pages for 10,000 slots, beyond what a TLB holds. With 2 MiB pages
// (Linux: madvise MADV_HUGEPAGE on a 2 MiB-aligned block, honoured where transparent huge pages are
// "always" or "madvise") the same state spans 40 pages.
#pragma once
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace tequant {

/// Stateless allocator: on Linux, blocks of at least `huge_page_threshold` bytes are 2 MiB-aligned,
/// rounded up to whole 2 MiB pages and marked for transparent huge pages; smaller blocks, and every
/// block elsewhere, come from operator new. The mark is advice: where the kernel declines it the
/// buffer works the same on 4 KiB pages.
template <class T>
struct host_allocator {
  using value_type = T;

  static constexpr std::size_t huge_page_size = std::size_t{2} << 20;
  /// From 4 MiB up, rounding to whole huge pages wastes at most a third of a block.
  static constexpr std::size_t huge_page_threshold = std::size_t{4} << 20;

  host_allocator() noexcept = default;
  template <class U>
  constexpr host_allocator(const host_allocator<U>&) noexcept {}

  [[nodiscard]] T* allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    const std::size_t bytes = n * sizeof(T);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (on_huge_pages(bytes)) {
      const std::size_t rounded = (bytes + huge_page_size - 1) & ~(huge_page_size - 1);
      void* p = std::aligned_alloc(huge_page_size, rounded);
      if (p == nullptr) throw std::bad_alloc();
      (void)::madvise(p, rounded, MADV_HUGEPAGE);  // advice only: a refusal leaves ordinary pages
      return static_cast<T*>(p);
    }
#endif
    return static_cast<T*>(::operator new(bytes));
  }

  void deallocate(T* p, std::size_t n) noexcept {
    if (on_huge_pages(n * sizeof(T))) std::free(p);
    else ::operator delete(p);
  }

  /// Whether a block of `bytes` is put on huge pages (and so 2 MiB-aligned).
  static constexpr bool on_huge_pages(std::size_t bytes) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    return bytes >= huge_page_threshold;
#else
    (void)bytes;
    return false;
#endif
  }

  template <class U>
  constexpr bool operator==(const host_allocator<U>&) const noexcept { return true; }
};

}  // namespace tequant
