// SPDX-License-Identifier: Apache-2.0
// An order-preserving float -> uint32 key, so that a transport's integer MAX reduces floats with
// fmaxf semantics (NaN ignored), deterministically on every rank.
//
// Why: MPI's MAX on MPI_FLOAT is `a > b ? a : b` in OpenMPI (also its AVX kernels), so a NaN wins or
// loses depending on operand order, and +0/-0 likewise; ranks combining in different orders could end
// with different bits and their delayed-scaling states would drift apart. NCCL's ncclMax on floats is
// fmaxf (NaN ignored unless every operand is NaN), which is also how tequant records amaxes. The key
// makes MPI agree with that: it is a total order (NaN < -inf < ... < -0 < +0 < ... < +inf), so MAX is
// commutative and associative on keys and every rank gets the same bits. A slot whose value is NaN on
// every rank reduces to the quiet NaN 0x7FC00000.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tequant::detail {

inline constexpr std::uint32_t max_key_nan = 0;              ///< key of every NaN: below everything
inline constexpr std::uint32_t canonical_quiet_nan = 0x7FC00000u;

constexpr std::uint32_t float_max_key(std::uint32_t u) noexcept {
  const bool nan = (u & 0x7FFFFFFFu) > 0x7F800000u;
  // negative: ~u (reverses their order, -0 -> 0x7FFFFFFF); non-negative: u with the top bit set.
  const std::uint32_t mask = static_cast<std::uint32_t>(static_cast<std::int32_t>(u) >> 31) | 0x80000000u;
  return nan ? max_key_nan : u ^ mask;
}

constexpr std::uint32_t float_from_max_key(std::uint32_t k) noexcept {
  const std::uint32_t mask = static_cast<std::uint32_t>(static_cast<std::int32_t>(~k) >> 31) | 0x80000000u;
  return k == max_key_nan ? canonical_quiet_nan : k ^ mask;
}

/// In place: data[i] (a float) becomes its key's bits. Branch-free so it vectorises.
inline void encode_max_keys(float* data, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, data + i, sizeof u);
    u = float_max_key(u);
    std::memcpy(data + i, &u, sizeof u);
  }
}

/// In place: the inverse of encode_max_keys (NaNs come back as the canonical quiet NaN).
inline void decode_max_keys(float* data, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t k;
    std::memcpy(&k, data + i, sizeof k);
    k = float_from_max_key(k);
    std::memcpy(data + i, &k, sizeof k);
  }
}

}  // namespace tequant::detail
