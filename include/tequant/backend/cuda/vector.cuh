// SPDX-License-Identifier: Apache-2.0
// 16-byte vector access and element conversion shared by the quantize kernels.
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/vector.cuh> needs a CUDA compiler (nvcc); host code includes the .hpp headers"
#endif

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "tequant/format/bits.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/half.hpp"

namespace tequant::detail {

/// Elements of T in one 16-byte access.
template <class T>
inline constexpr int vec_elems = static_cast<int>(16 / sizeof(T));

/// Element -> float, exact for every input type (bf16/fp16 widen without rounding).
__device__ __forceinline__ float load_as_float(const float* p) { return __ldg(p); }
__device__ __forceinline__ float load_as_float(const bf16* p) {
  return __uint_as_float(static_cast<std::uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(p))) << 16);
}
__device__ __forceinline__ float load_as_float(const fp16* p) {
  return __half2float(__ushort_as_half(__ldg(reinterpret_cast<const unsigned short*>(p))));
}

/// The vec_elems<T> floats of one 16-byte vector.
template <class T>
__device__ __forceinline__ void unpack(const uint4& v, float* f) {
  const std::uint32_t w[4] = {v.x, v.y, v.z, v.w};
  if constexpr (sizeof(T) == 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) f[i] = __uint_as_float(w[i]);
  } else if constexpr (std::is_same_v<T, bf16>) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] & 0xFFFFu)));
      f[2 * i + 1] = __half2float(__ushort_as_half(static_cast<unsigned short>(w[i] >> 16)));
    }
  }
}

/// Streaming 16-byte load: read once, so do not keep it in L1.
__device__ __forceinline__ uint4 load_vec(const void* p) { return __ldcs(reinterpret_cast<const uint4*>(p)); }
/// Cached 16-byte load: for current scaling's amax pass, whose input the cast pass reads right after
/// (a tensor that fits in L2 is then read from HBM once, not twice).
__device__ __forceinline__ uint4 load_vec_cached(const void* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

/// Two FP8 codes, `a` in the low byte. On sm_89+ this is the cvt.rn.satfinite instruction, checked
/// bit-equal to encode_fp8 on every non-NaN float by tests/cuda/numerics_cuda_test.cu. NaN goes
/// through encode_fp8, which writes 0x7F for every NaN as cuda_fp8.h's reference does, because the
/// PTX ISA leaves the instruction's NaN code unspecified. The branch is almost never taken, and then by whole warps rarely.
__device__ __forceinline__ std::uint32_t encode2(float a, float b, fp8_dtype t) {
  if (isnan(a) || isnan(b)) [[unlikely]]
    return std::uint32_t{encode_fp8(t, a)} | (std::uint32_t{encode_fp8(t, b)} << 8);
  return t == fp8_dtype::e4m3 ? __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3)
                              : __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E5M2);
}
__device__ __forceinline__ std::uint8_t encode1(float a, fp8_dtype t) { return static_cast<std::uint8_t>(encode2(a, 0.0f, t)); }

/// N codes (N = 4, 8 or 16) of f[i] * m, packed little-endian into N/4 words.
template <int N>
__device__ __forceinline__ void encode_scaled(const float* f, float m, fp8_dtype t, std::uint32_t* words) {
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    words[i] = encode2(f[4 * i] * m, f[4 * i + 1] * m, t) | (encode2(f[4 * i + 2] * m, f[4 * i + 3] * m, t) << 16);
  }
}

/// Stores N/4 words (N = 4, 8, 16) with one access; the destination is N-byte aligned.
template <int N>
__device__ __forceinline__ void store_codes(std::uint8_t* p, const std::uint32_t* w) {
  if constexpr (N == 4) {
    __stcs(reinterpret_cast<unsigned int*>(p), w[0]);
  } else if constexpr (N == 8) {
    __stcs(reinterpret_cast<uint2*>(p), make_uint2(w[0], w[1]));
  } else {
    __stcs(reinterpret_cast<uint4*>(p), make_uint4(w[0], w[1], w[2], w[3]));
  }
}

/// max over a group of G consecutive lanes (G a power of two <= 32); every lane gets the result.
template <int G>
__device__ __forceinline__ float group_max(float v) {
#pragma unroll
  for (int o = 1; o < G; o <<= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

/// *dst = nan_ignoring_max(*dst, v) atomically, for a non-NaN v >= +0 (a block's amax), bit-equal to
/// the host's update of the same staging value whatever it held before. The integer atomicMax alone
/// (TE's trick) is a float max only while *dst is a non-negative non-NaN float: a positive NaN (an
/// imported TE history row 0, a collective's NaN) would stay where the host replaces it by v, and
/// with v = +0 a negative value or NaN would stay where the host writes +0. Those cases take a CAS loop.
__device__ __forceinline__ void atomic_nan_ignoring_max(float* dst, float v) {
  auto* bits = reinterpret_cast<unsigned int*>(dst);
  unsigned int old;
  if (v > 0.0f) {
    old = static_cast<unsigned int>(atomicMax(reinterpret_cast<int*>(dst), __float_as_int(v)));
    // As int32: negative floats (-0 and negative NaN included) lose to v, as on the host; values in
    // [+0, inf] order like the floats. Only a positive NaN (int above 0x7F800000) was wrongly kept.
    if (static_cast<int>(old) <= 0x7F800000) return;
  } else {
    old = *reinterpret_cast<volatile unsigned int*>(bits);  // usually already the answer: no atomic at all
  }
  for (;;) {
    const unsigned int want = __float_as_uint(nan_ignoring_max(__uint_as_float(old), v));
    if (want == old) return;
    const unsigned int seen = atomicCAS(bits, old, want);
    if (seen == old) return;
    old = seen;
  }
}

TEQUANT_HD inline bool aligned16(const void* p) noexcept { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace tequant::detail
