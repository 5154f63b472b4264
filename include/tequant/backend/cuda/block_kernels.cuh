// SPDX-License-Identifier: Apache-2.0
// MXFP8 (1x32, 32x1, 32x32; E8M0 scales) and FP8 block scaling (1x128, 128x1, 128x128; fp32 scales)
// in one tile kernel: a CTA loads a B x (32*E) tile once (E = elements per 16-byte vector), keeps it in
// registers, and writes the rowwise and/or columnwise outputs from that single read.
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/block_kernels.cuh> needs a CUDA compiler (nvcc); host code includes the .hpp headers"
#endif

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "tequant/backend/cuda/vector.cuh"
#include "tequant/format/e8m0.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/scale.hpp"

namespace tequant::detail {

inline constexpr int block_threads = 256;  // 8 warps; warp w owns tile rows w, w+8, ...

/// One quantization of a row-major [rows, cols] matrix. Scale element addresses (in elements of the
/// scale type: bytes for E8M0, floats for fp32):
///   rowwise    row_scale + (r / row_scale_rdiv) * row_scale_rstride + (c / B) * row_scale_bstride
///   columnwise col_scale + (r / B) * col_scale_bstride + (c / col_scale_cdiv) * col_scale_cstride
/// Rowwise data has the input's layout; columnwise data too, or [cols, rows] when transposed.
struct block_kernel_args {
  const void* x;
  std::size_t rows, cols;
  fp8_dtype dtype;
  bool e8m0;            // MXFP8: E8M0 scale bytes; otherwise FP8 block scaling: fp32 scale_inv
  bool two_d;           // one scale per B x B tile, shared by both outputs
  bool vec_ok;          // every 16-byte input vector and E-byte output store is aligned
  bool power_2;         // block scaling: scale_from_amax knobs
  bool inv_in_double;   // block scaling: scale_inv = float(1.0 / double(s)) instead of 1.0f / s
  float epsilon, value_for_inf, fp8_max, rcp_fp8_max;
  std::uint8_t* row_data;
  void* row_scale;
  std::size_t row_scale_rstride, row_scale_bstride, row_scale_rdiv;
  std::uint8_t* col_data;
  void* col_scale;
  std::size_t col_scale_bstride, col_scale_cstride, col_scale_cdiv;
};

struct block_scale {
  float mult;        // q = sat_cast(x * mult)
  float inv;         // fp32 scale_inv (block scaling)
  std::uint8_t e8;   // E8M0 code (MXFP8)
};

__device__ __forceinline__ block_scale make_block_scale(const block_kernel_args& a, float amax) {
  block_scale s{};
  if (a.e8m0) {
    // TE multiplies by the rounded fp32 reciprocal of fp8_max rather than dividing.
    s.e8 = encode_e8m0(amax * a.rcp_fp8_max);
    s.mult = e8m0_cast_multiplier(s.e8);  // TE's reciprocal: 1 for code 0, 0 for 254
  } else {
    s.mult = scale_from_amax(amax, a.fp8_max, a.power_2, a.epsilon, a.value_for_inf);
    s.inv = a.inv_in_double ? static_cast<float>(1.0 / static_cast<double>(s.mult)) : __frcp_rn(s.mult);
  }
  return s;
}

__device__ __forceinline__ void store_scale(void* base, std::size_t index, const block_scale& s, bool e8m0) {
  if (e8m0) {
    static_cast<std::uint8_t*>(base)[index] = s.e8;
  } else {
    static_cast<float*>(base)[index] = s.inv;
  }
}

/// E elements of row r from column c: one 16-byte load on the fast path, else element by element
/// with zeros past the matrix edge (a zero never raises an amax).
template <class T>
__device__ __forceinline__ uint4 load_tile_vec(const block_kernel_args& a, std::size_t r, std::size_t c) {
  constexpr int E = vec_elems<T>;
  const T* x = static_cast<const T*>(a.x);
  if (r >= a.rows || c >= a.cols) return make_uint4(0, 0, 0, 0);
  if (a.vec_ok && c + E <= a.cols) return load_vec(x + r * a.cols + c);
  std::uint32_t w[4] = {0, 0, 0, 0};  // constant indices after unrolling: stays in registers
#pragma unroll
  for (int e = 0; e < E; ++e) {
    if (c + e < a.cols) {
      if constexpr (sizeof(T) == 4) {
        w[e] = __float_as_uint(__ldg(reinterpret_cast<const float*>(x) + r * a.cols + c + e));
      } else {
        const std::uint32_t h = __ldg(reinterpret_cast<const unsigned short*>(x) + r * a.cols + c + e);
        w[e / 2] |= h << (16 * (e % 2));
      }
    }
  }
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// Writes the E codes of row r at column c into a row-major [rows, cols] byte matrix.
template <int E>
__device__ __forceinline__ void store_tile_codes(const block_kernel_args& a, std::uint8_t* out, std::size_t r,
                                                 std::size_t c, const std::uint32_t* w) {
  if (r >= a.rows || c >= a.cols) return;
  std::uint8_t* p = out + r * a.cols + c;
  if (a.vec_ok && c + E <= a.cols) {
    store_codes<E>(p, w);
    return;
  }
#pragma unroll
  for (int e = 0; e < E; ++e)
    if (c + e < a.cols) p[e] = static_cast<std::uint8_t>(w[e / 4] >> (8 * (e % 4)));
}

/// Byte offset of (input column `col`, tile row `row`) in the transposed shared tile: column-major,
/// H bytes per column, with the 4-byte words of each column XOR-swizzled by the writing lane. The
/// lanes of a warp write the same row of 32 columns E apart; unswizzled, those bytes lie H*E bytes
/// apart, all in one shared-memory bank (a 32-way conflict on every byte store). The swizzle puts
/// lane l's word in bank (word ^ l) (for H = 128; H = 32 spreads over 8 banks). It permutes words only
/// inside aligned 16-byte groups plus whole groups, so the read-back stays one 16-byte load.
/// (Host-callable too: tests/cuda/transposed_tile_test.cu checks the mapping without a GPU.)
template <int E, int H>
__host__ __device__ __forceinline__ int transposed_offset(int col, int row) {
  constexpr int words = H / 4;
  const int swizzle = (col / E) & (words - 1);  // the writing lane
  return col * H + ((((row >> 2) ^ swizzle)) << 2) + (row & 3);
}

/// The 16 bytes of column `col` at tile rows [16*chunk, 16*chunk + 16), un-swizzled.
template <int E, int H>
__host__ __device__ __forceinline__ uint4 load_transposed_chunk(const std::uint8_t* tile, int col, int chunk) {
  constexpr int words = H / 4;
  const int swizzle = (col / E) & (words - 1);
  // Logical word 4*chunk + j sits at physical word (4*chunk + j) ^ swizzle
  // = 4*(chunk ^ (swizzle >> 2)) + (j ^ (swizzle & 3)).
  uint4 q = *reinterpret_cast<const uint4*>(tile + col * H + ((chunk ^ (swizzle >> 2)) << 4));
  // word j <- word j ^ (swizzle & 3), as two conditional swaps (no local-memory indexing)
  if (swizzle & 1) q = make_uint4(q.y, q.x, q.w, q.z);
  if (swizzle & 2) q = make_uint4(q.z, q.w, q.x, q.y);
  return q;
}

/// T: input type; B: block length (32 MXFP8, 128 block scaling); H: tile height (B when columnwise or
/// 2D outputs are wanted, less for rowwise-only 1D, where rows are independent); Transposed:
/// columnwise data is written as [cols, rows] through shared memory.
template <class T, int B, int H, bool Transposed>
__global__ void __launch_bounds__(block_threads, 2) block_kernel(const __grid_constant__ block_kernel_args a) {
  constexpr int E = vec_elems<T>;
  constexpr int W = 32 * E;  // tile width in elements
  constexpr int K = H / 8;   // rows per thread
  constexpr int G = B / E;   // lanes sharing one 1 x B block (or one B-wide slice of a B x B tile)
  static_assert(G >= 1 && G <= 32 && (G & (G - 1)) == 0, "tequant: block length must be E..32*E");
  static_assert(H % 8 == 0 && H <= B, "tequant: tile height must be a multiple of 8 and at most B");
  __shared__ float partial[8][W];
  // Read back as uint4 below: a byte array is only 1-byte aligned unless asked (PTX `.align 1`).
  __shared__ alignas(16) std::uint8_t transposed[Transposed ? W * H : 1];

  const std::size_t tiles_x = (a.cols + W - 1) / W;
  const std::size_t r0 = (blockIdx.x / tiles_x) * H;
  const std::size_t c0 = (blockIdx.x % tiles_x) * W;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const std::size_t c = c0 + static_cast<std::size_t>(lane) * E;
  const bool want_cols = a.col_data != nullptr || a.two_d;

  uint4 raw[K];
#pragma unroll
  for (int k = 0; k < K; ++k) raw[k] = load_tile_vec<T>(a, r0 + warp + 8 * k, c);

  // Column maxima over the tile height (and, for 2D, the tile maximum) through shared memory.
  float col_mult[E];
  float tile_mult = 0.0f;
  block_scale tile_scale{};
  if (want_cols) {
    static_assert(!Transposed || H == B, "tequant: columnwise tiles span a whole block");
    float col_max[E];
#pragma unroll
    for (int e = 0; e < E; ++e) col_max[e] = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      float f[E];
      unpack<T>(raw[k], f);
#pragma unroll
      for (int e = 0; e < E; ++e) col_max[e] = fmaxf(col_max[e], fabsf(f[e]));  // fmaxf drops NaN, as TE's amax
    }
#pragma unroll
    for (int e = 0; e < E; ++e) partial[warp][lane * E + e] = col_max[e];
    __syncthreads();
#pragma unroll
    for (int e = 0; e < E; ++e) {
      float m = 0.0f;
#pragma unroll
      for (int w = 0; w < 8; ++w) m = fmaxf(m, partial[w][lane * E + e]);
      col_max[e] = m;
    }
    if (a.two_d) {
      float m = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) m = fmaxf(m, col_max[e]);
      tile_scale = make_block_scale(a, group_max<G>(m));
      tile_mult = tile_scale.mult;
#pragma unroll
      for (int e = 0; e < E; ++e) col_mult[e] = tile_mult;
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const block_scale s = make_block_scale(a, col_max[e]);
        col_mult[e] = s.mult;
        // Warp 0 owns the scale of each column block; the others only need the multiplier.
        const std::size_t ce = c + e;
        if (warp == 0 && a.col_data != nullptr && ce < a.cols && r0 < a.rows && ce % a.col_scale_cdiv == 0)
          store_scale(a.col_scale, (r0 / B) * a.col_scale_bstride + (ce / a.col_scale_cdiv) * a.col_scale_cstride, s,
                      a.e8m0);
      }
    }
    if (a.two_d && warp == 0 && a.col_data != nullptr) {
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const std::size_t ce = c + e;
        if (ce < a.cols && r0 < a.rows && ce % a.col_scale_cdiv == 0)
          store_scale(a.col_scale, (r0 / B) * a.col_scale_bstride + (ce / a.col_scale_cdiv) * a.col_scale_cstride,
                      tile_scale, a.e8m0);
      }
    }
  }

  if (a.row_data != nullptr) {
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const std::size_t r = r0 + warp + 8 * k;
      float f[E];
      unpack<T>(raw[k], f);
      block_scale s = tile_scale;
      if (!a.two_d) {
        float m = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e) m = fmaxf(m, fabsf(f[e]));
        s = make_block_scale(a, group_max<G>(m));  // every lane takes part in the shuffle
      }
      std::uint32_t w[E / 4];
      encode_scaled<E>(f, s.mult, a.dtype, w);
      store_tile_codes<E>(a, a.row_data, r, c, w);
      if (lane % G == 0 && r < a.rows && c < a.cols && r % a.row_scale_rdiv == 0)
        store_scale(a.row_scale, (r / a.row_scale_rdiv) * a.row_scale_rstride + (c / B) * a.row_scale_bstride, s, a.e8m0);
    }
  }

  if constexpr (H == B) {
    if (a.col_data != nullptr) {
#pragma unroll
      for (int k = 0; k < K; ++k) {
        float f[E];
        unpack<T>(raw[k], f);
        std::uint32_t w[E / 4];
#pragma unroll
        for (int e = 0; e < E; e += 4)
          w[e / 4] = encode2(f[e] * col_mult[e], f[e + 1] * col_mult[e + 1], a.dtype) |
                     (encode2(f[e + 2] * col_mult[e + 2], f[e + 3] * col_mult[e + 3], a.dtype) << 16);
        if constexpr (Transposed) {
#pragma unroll
          for (int e = 0; e < E; ++e)
            transposed[transposed_offset<E, H>(lane * E + e, warp + 8 * k)] =
                static_cast<std::uint8_t>(w[e / 4] >> (8 * (e % 4)));
        } else {
          store_tile_codes<E>(a, a.col_data, r0 + warp + 8 * k, c, w);
        }
      }
      if constexpr (Transposed) {
        // Output row = input column: H consecutive bytes per column, written 16 bytes at a time.
        __syncthreads();
        const bool full = r0 + H <= a.rows && a.rows % 16 == 0 && aligned16(a.col_data);
        for (int i = threadIdx.x; i < W * H / 16; i += block_threads) {
          const int col = i / (H / 16), chunk = i % (H / 16);
          const std::size_t cc = c0 + col;
          if (cc >= a.cols) continue;
          std::uint8_t* dst = a.col_data + cc * a.rows + r0 + chunk * 16;
          if (full) {
            __stcs(reinterpret_cast<uint4*>(dst), load_transposed_chunk<E, H>(transposed, col, chunk));
          } else {
            for (int b = 0; b < 16; ++b)
              if (r0 + chunk * 16 + b < a.rows) dst[b] = transposed[transposed_offset<E, H>(col, chunk * 16 + b)];
          }
        }
      }
    }
  }
  (void)tile_mult;
}

}  // namespace tequant::detail
