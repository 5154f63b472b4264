// SPDX-License-Identifier: Apache-2.0
// The exhaustive format tests' sweep: every input in [0, total), split across the machine's cores.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace format_test {

/// The first input in [0, total) for which check(input) is false, or ~0 when there is none.
template <class Check>
std::uint64_t first_mismatch(std::uint64_t total, Check check) {
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> threads;
  std::atomic<std::uint64_t> bad{~0ull};
  for (unsigned t = 0; t < n; ++t) {
    threads.emplace_back([&, t] {
      const std::uint64_t lo = total * t / n, hi = total * (t + 1) / n;
      for (std::uint64_t i = lo; i < hi; ++i) {
        if (!check(static_cast<std::uint32_t>(i))) {
          std::uint64_t cur = bad.load();
          while (i < cur && !bad.compare_exchange_weak(cur, i)) {
          }
          return;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  return bad.load();
}

}  // namespace format_test
