// SPDX-License-Identifier: Apache-2.0
// Per-tensor FP8 kernels (delayed and current scaling): amax fused into the cast, amax-only pass,
// device-side scale. One streaming pass over the input with 16-byte loads where alignment allows.
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/tensor_kernels.cuh> needs a CUDA compiler (nvcc); host code includes the .hpp headers"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tequant/backend/cuda/vector.cuh"
#include "tequant/format/bits.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/scale.hpp"

namespace tequant::detail {

inline constexpr int tensor_threads = 256;

/// Arguments of the per-tensor kernel. Elements [0, head) and [head + vecs*E, n) go through scalar
/// accesses; the vecs 16-byte vectors in between through vector accesses (vecs = 0 when the input and
/// output cannot be aligned together).
struct tensor_kernel_args {
  const void* x;
  std::size_t n;
  std::size_t head;
  std::size_t vecs;
  const float* scale;   // quantize only
  std::uint8_t* out;    // quantize only
  float* scale_inv;     // optional: 1/scale, bound to this output
  float* amax;          // optional: max-accumulated max |x| (NaN ignored)
  fp8_dtype dtype;
};

/// Block-wide max, then one atomic per block into *dst (the host's nan_ignoring_max, see vector.cuh).
__device__ __forceinline__ void block_amax_to(float* dst, float m) {
  __shared__ float partial[tensor_threads / 32];
  m = group_max<32>(m);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < tensor_threads / 32 ? partial[threadIdx.x] : 0.0f;
    m = group_max<32>(m);
    if (threadIdx.x == 0) atomic_nan_ignoring_max(dst, m);
  }
}

/// Quantize (and record the amax) or, with Quantize = false, only the amax.
template <class T, bool Quantize>
__global__ void __launch_bounds__(tensor_threads) tensor_kernel(tensor_kernel_args a) {
  constexpr int E = vec_elems<T>;
  constexpr int U = 4;  // vectors in flight per thread: enough bytes outstanding to cover HBM latency
  const T* x = static_cast<const T*>(a.x);
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t nt = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const float s = Quantize ? __ldg(a.scale) : 1.0f;
  if (Quantize && a.scale_inv != nullptr && tid == 0) *a.scale_inv = __frcp_rn(s);  // = scale_inverse(s)
  float m = 0.0f;  // fmaxf drops NaN, so this is the NaN-ignoring max of |x|
  const T* xv = x + a.head;
  std::uint8_t* ov = Quantize ? a.out + a.head : nullptr;
  for (std::size_t base = tid; base < a.vecs; base += nt * U) {
    uint4 v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::size_t i = base + u * nt;
      if (i < a.vecs) v[u] = Quantize ? load_vec(xv + i * E) : load_vec_cached(xv + i * E);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const std::size_t i = base + u * nt;
      if (i < a.vecs) {
        float f[E];
        unpack<T>(v[u], f);
#pragma unroll
        for (int k = 0; k < E; ++k) m = fmaxf(m, fabsf(f[k]));
        if constexpr (Quantize) {
          std::uint32_t w[E / 4];
          encode_scaled<E>(f, s, a.dtype, w);
          store_codes<E>(ov + i * E, w);
        }
      }
    }
  }
  const std::size_t tail = a.head + a.vecs * E;
  const std::size_t scalars = a.head + (a.n - tail);
  for (std::size_t k = tid; k < scalars; k += nt) {
    const std::size_t i = k < a.head ? k : tail + (k - a.head);
    const float f = load_as_float(x + i);
    m = fmaxf(m, fabsf(f));
    if constexpr (Quantize) a.out[i] = encode1(f * s, a.dtype);
  }
  if (a.amax != nullptr) block_amax_to(a.amax, m);
}

/// Current scaling's scale, on the device so nothing waits for the amax on the host.
struct scale_kernel_args {
  const float* amax;
  float* scale;
  float* scale_inv;  // optional
  float fp8_max;
  float epsilon;
  float value_for_inf;
  bool power_2;
};

template <int = 0>  // a template: several CUDA translation units of one program may include it
__global__ void scale_from_amax_kernel(scale_kernel_args a) {
  const float s = scale_from_amax(*a.amax, a.fp8_max, a.power_2, a.epsilon, a.value_for_inf);
  *a.scale = s;
  if (a.scale_inv != nullptr) *a.scale_inv = __frcp_rn(s);
}

/// *p = fmax(*p, v) for one value (the host-side record of an amax observed elsewhere).
template <int = 0>  // a template: several CUDA translation units of one program may include it
__global__ void max_accumulate_kernel(float* p, float v) { *p = nan_ignoring_max(*p, v); }

template <class T>
__global__ void fill_kernel(T* p, std::size_t n, T value) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = value;
}

/// Splits n elements into scalar head, 16-byte vectors and scalar tail so that both the input
/// (16-byte vectors) and the FP8 output (E-byte stores) are aligned in the vector part.
template <class T>
inline void split_for_vectors(const T* x, const std::uint8_t* out, std::size_t n, std::size_t& head, std::size_t& vecs) {
  constexpr std::size_t E = vec_elems<T>;
  const auto xa = reinterpret_cast<std::uintptr_t>(x);
  head = n;
  vecs = 0;
  if (xa % sizeof(T) != 0) return;  // misaligned elements: scalar only
  std::size_t h = ((16 - (xa & 15)) & 15) / sizeof(T);
  if (h > n) return;
  const bool out_ok = out == nullptr || (reinterpret_cast<std::uintptr_t>(out + h) % E) == 0;
  if (!out_ok) return;
  head = h;
  vecs = (n - h) / E;
}

}  // namespace tequant::detail
