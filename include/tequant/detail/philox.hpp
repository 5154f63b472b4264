// SPDX-License-Identifier: Apache-2.0
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", the generator cuRAND's
// Philox uses): a counter-based generator, so any element's random bits follow from (key, counter)
// alone and host and device code draw identical bits without sharing a sequential state.
#pragma once
#include <array>
#include <cstdint>

#include "tequant/config.hpp"

namespace tequant::detail {

using philox_counter = std::array<std::uint32_t, 4>;
using philox_key = std::array<std::uint32_t, 2>;

/// Ten rounds of Philox4x32 on `ctr` with `key` (the key is bumped by the Weyl constants between rounds).
TEQUANT_HD constexpr philox_counter philox4x32_10(philox_counter ctr, philox_key key) noexcept {
  constexpr std::uint32_t mul0 = 0xD2511F53u, mul1 = 0xCD9E8D57u;
  constexpr std::uint32_t weyl0 = 0x9E3779B9u, weyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round != 0) {
      key[0] += weyl0;
      key[1] += weyl1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(mul0) * ctr[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(mul1) * ctr[2];
    ctr = {static_cast<std::uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<std::uint32_t>(p1),
           static_cast<std::uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<std::uint32_t>(p0)};
  }
  return ctr;
}

/// tequant's stochastic-rounding stream: the four 32-bit words for elements 4g .. 4g+3 of a stream that
/// starts at `offset` (in groups of four) under `seed`. Key = the seed's two halves; counter = the
/// 64-bit group number offset + g in words 0-1, words 2-3 zero.
TEQUANT_HD constexpr philox_counter philox_group(std::uint64_t seed, std::uint64_t offset, std::uint64_t g) noexcept {
  const std::uint64_t c = offset + g;
  return philox4x32_10({static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32), 0u, 0u},
                       {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

}  // namespace tequant::detail
