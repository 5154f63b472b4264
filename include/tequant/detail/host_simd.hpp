// SPDX-License-Identifier: Apache-2.0
// Host inner loops: |x| max and x*scale -> FP8, bit-exact with format/fp8.hpp. This file chooses among
// the portable loops (host_simd_scalar.hpp), the AVX2 + F16C kernels (host_simd_avx2.hpp) and the
// AVX-512 kernels (host_simd_avx512.hpp: bf16 casts, MXFP8 rowwise and columnwise, block scaling)
// at run time, and defines host_kernels.hpp's entry points.
//
// GCC 12 does not vectorise a float max reduction without finite-math flags (which would break the
// NaN/inf rules), nor the branchy FP8 encoder. So on x86 with g++/clang every kernel has an AVX2 + F16C
// version compiled with a target attribute (whatever flags the user's translation unit has) and chosen
// at run time by host_has_avx2(); every other target gets the portable scalar loops, whose amax uses an
// integer max over sign-cleared bit patterns with NaN mapped to 0 (clang vectorises it). Both versions
// produce the same bits: the vector code uses the same IEEE operations and integer encoders.
#pragma once
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tequant/config.hpp"
#include "tequant/detail/host_kernels.hpp"
#include "tequant/detail/host_simd_avx2.hpp"
#include "tequant/detail/host_simd_avx512.hpp"
#include "tequant/detail/host_simd_scalar.hpp"

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
#  include <cpuid.h>
#endif

namespace tequant::detail {

/// Whether the AVX2 + F16C kernels can run here. Checked once; the function-local static makes the
/// first call thread-safe and the answer never changes within a process.
inline bool host_has_avx2() noexcept {
#if TEQUANT_HOST_AVX2_BASELINE
  return true;
#elif TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  static const bool yes = [] {
    __builtin_cpu_init();  // in case this runs before the CPU model is initialised (static initialisers)
    unsigned a = 0, b = 0, c = 0, d = 0;
    // __builtin_cpu_supports("avx2") also checks that the OS saves the YMM state.
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
  }();
  return yes;
#else
  return false;
#endif
}

/// Whether the AVX-512 bf16 kernels (F, BW, VL, DQ, VBMI) can run here (checked once, like host_has_avx2).
inline bool host_has_avx512() noexcept {
#if TEQUANT_HOST_AVX512_BASELINE
  return true;
#elif TEQUANT_HAS_X86_TARGET_ATTRIBUTES
  static const bool yes = [] {
    __builtin_cpu_init();
    // Also checks that the OS saves the ZMM and mask registers.
    return host_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vbmi");
  }();
  return yes;
#else
  return false;
#endif
}

#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES
#  define TEQUANT_HOST_DISPATCH(T, call)                  \
    if constexpr (avx2::input<T>) {                       \
      if (host_has_avx2()) return avx2::call;             \
    }
// The bf16 casts that have an AVX-512 version try it first.
#  define TEQUANT_HOST_DISPATCH_AVX512_BF16(T, call) \
    if constexpr (std::is_same_v<T, bf16>) {          \
      if (host_has_avx512()) return avx512::call;     \
    }
// The casts that have an AVX-512 version for fp32 and bf16 (MXFP8, block scaling).
#  define TEQUANT_HOST_DISPATCH_AVX512(T, call)                           \
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, bf16>) { \
      if (host_has_avx512()) return avx512::call;                         \
    }
#else
#  define TEQUANT_HOST_DISPATCH(T, call)
#  define TEQUANT_HOST_DISPATCH_AVX512_BF16(T, call)
#  define TEQUANT_HOST_DISPATCH_AVX512(T, call)
#endif

// The entry points declared in host_kernels.hpp (documented there).
template <class T>
float amax_host(const T* x, std::size_t n) noexcept {
  const auto bits = [&]() noexcept -> std::uint32_t {
    TEQUANT_HOST_DISPATCH_AVX512_BF16(T, amax(x, n))
    TEQUANT_HOST_DISPATCH(T, amax(x, n))
    return amax_bits_scalar(x, n);
  };
  return bits_float(bits());
}

template <fp8_dtype D, class T>
void scale_encode_host(const T* x, std::size_t n, float scale, std::uint8_t* out, std::uint32_t* amax_bits) noexcept {
  const auto run = [&]() noexcept -> std::uint32_t {
    TEQUANT_HOST_DISPATCH_AVX512_BF16(T, scale_encode<D>(x, n, scale, out, amax_bits != nullptr))
    TEQUANT_HOST_DISPATCH(T, scale_encode<D>(x, n, scale, out, amax_bits != nullptr))
    return scale_encode_scalar<D>(x, n, scale, out, amax_bits != nullptr);
  };
  const std::uint32_t m = run();
  if (amax_bits && m > *amax_bits) *amax_bits = m;
}

template <fp8_dtype D, class T>
void scale_encode_each_host(const T* x, std::size_t n, const float* scale, std::uint8_t* out) noexcept {
  TEQUANT_HOST_DISPATCH(T, scale_encode_each<D>(x, n, scale, out))
  scale_encode_each_scalar<D>(x, n, scale, out);
}

template <class T>
void column_amax_host(const T* x, std::size_t n, std::uint32_t* colmax) noexcept {
  TEQUANT_HOST_DISPATCH(T, column_amax(x, n, colmax))
  column_amax_scalar(x, n, colmax);
}

template <fp8_dtype D, class T>
void mxfp8_rowwise_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                        std::size_t scale_cols, [[maybe_unused]] bool stream) noexcept {
  TEQUANT_HOST_DISPATCH_AVX512(T, mxfp8_rowwise<D>(x, M, K, data, scale, scale_cols, stream))
  TEQUANT_HOST_DISPATCH(T, mxfp8_rowwise<D>(x, M, K, data, scale, scale_cols, stream))
  mxfp8_rowwise_scalar<D>(x, M, K, data, scale, scale_cols);
}

template <fp8_dtype D, class T>
void mxfp8_columnwise_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, std::uint8_t* scale,
                           std::size_t scale_cols, [[maybe_unused]] bool stream) noexcept {
  TEQUANT_HOST_DISPATCH_AVX512(T, mxfp8_columnwise<D>(x, M, K, data, scale, scale_cols, stream))
  TEQUANT_HOST_DISPATCH(T, mxfp8_columnwise<D>(x, M, K, data, scale, scale_cols, stream))
  mxfp8_columnwise_scalar<D>(x, M, K, data, scale, scale_cols);
}

template <fp8_dtype D, class T>
void block_rowwise_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale_inv,
                        std::size_t scale_stride, bool pow2, float eps, float value_for_inf, [[maybe_unused]] bool stream) noexcept {
  TEQUANT_HOST_DISPATCH_AVX512(T, block_rowwise<D>(x, M, K, data, scale_inv, scale_stride, pow2, eps, value_for_inf, stream))
  TEQUANT_HOST_DISPATCH(T, block_rowwise<D>(x, M, K, data, scale_inv, scale_stride, pow2, eps, value_for_inf, stream))
  block_rowwise_scalar<D>(x, M, K, data, scale_inv, scale_stride, pow2, eps, value_for_inf);
}

template <fp8_dtype D, class T>
void block_2d_host(const T* x, std::size_t M, std::size_t K, std::uint8_t* data, float* scale, bool pow2, float eps,
                   float value_for_inf, [[maybe_unused]] bool stream) noexcept {
  TEQUANT_HOST_DISPATCH_AVX512(T, block_2d<D>(x, M, K, data, scale, pow2, eps, value_for_inf, stream))
  TEQUANT_HOST_DISPATCH(T, block_2d<D>(x, M, K, data, scale, pow2, eps, value_for_inf, stream))
  block_2d_scalar<D>(x, M, K, data, scale, pow2, eps, value_for_inf);
}

#undef TEQUANT_HOST_DISPATCH
#undef TEQUANT_HOST_DISPATCH_AVX512_BF16
#undef TEQUANT_HOST_DISPATCH_AVX512

}  // namespace tequant::detail
