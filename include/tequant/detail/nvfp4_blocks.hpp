// SPDX-License-Identifier: Apache-2.0
// One NVFP4 block's work (its scale and its codes) as __host__ __device__ functions: each thread of the
// CUDA kernels (backend/cuda/nvfp4_kernels.cuh) runs one of them, and a host test runs the same
// functions over every block against host_backend, so the code the kernels run is checked on machines
// without a GPU. Same rule and fp32 operation order as host_nvfp4.hpp: format/nvfp4.hpp's functions,
// elements widened exactly, amax by integer keys with NaN ignored.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tequant/backend/layouts.hpp"
#include "tequant/config.hpp"
#include "tequant/detail/philox.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e2m1.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/half.hpp"
#include "tequant/format/nvfp4.hpp"

namespace tequant::detail {

/// Everything one NVFP4 cast of x [rows, cols] (row-major) needs, as plain pointers (a kernel argument).
/// A direction is requested by a non-null data pointer. Scale entries: rowwise (m, k/16) at
/// row_scale[m * row_scale_cols + k/16]; columnwise (k, m/16) at col_scale[k * col_scale_cols + m/16];
/// columnwise data is the transpose [cols, rows]. `tile_scale` (2D only): the code of tile (mb, kb) at
/// tile_scale[mb * ceil(cols/16) + kb]. Stochastic rounding when `stochastic`: element e of the rowwise
/// (columnwise) stream draws word e of Philox groups from row_first (col_first) under `seed`.
struct nvfp4_cast_args {
  const void* x;
  std::size_t rows, cols;
  std::uint8_t* row_data;
  std::uint8_t* row_scale;
  std::size_t row_scale_cols;
  std::uint8_t* col_data;
  std::uint8_t* col_scale;
  std::size_t col_scale_cols;
  std::uint8_t* tile_scale;
  bool stochastic;
  std::uint64_t seed, row_first, col_first;
};

/// Groups of four random words a stream over n elements consumes.
TEQUANT_HD constexpr std::uint64_t nvfp4_groups(std::size_t n) noexcept {
  return (static_cast<std::uint64_t>(n) + 3) / 4;
}

/// The arguments of a cast of x [M, K] into the directions `o` requests (rs, cs: their scale shapes),
/// tile_scale left null. Stochastic streams as the host draws them: the rowwise one from *opt.rng_offset,
/// the columnwise one right after it (whether or not the rowwise direction is requested).
inline nvfp4_cast_args nvfp4_make_cast_args(const void* x, std::size_t M, std::size_t K, const nvfp4_options& opt,
                                            const nvfp4_output& o, scale_shape rs, scale_shape cs) noexcept {
  nvfp4_cast_args a{};
  a.x = x;
  a.rows = M;
  a.cols = K;
  if (!o.rowwise_data.empty()) {
    a.row_data = o.rowwise_data.data();
    a.row_scale = o.rowwise_scale.data();
    a.row_scale_cols = rs.cols;
  }
  if (!o.columnwise_data.empty()) {
    a.col_data = o.columnwise_data.data();
    a.col_scale = o.columnwise_scale.data();
    a.col_scale_cols = cs.cols;
  }
  a.stochastic = opt.rng_offset != nullptr;
  a.seed = opt.rng_seed;
  a.row_first = a.stochastic ? *opt.rng_offset : 0;
  a.col_first = a.row_first + nvfp4_groups(M * K);
  return a;
}

/// Where a stochastic cast leaves *opt.rng_offset: past the last group it drew (the columnwise stream
/// sits after the rowwise one's place even when only the columnwise direction is cast).
inline void nvfp4_advance_stream(const nvfp4_cast_args& a, const nvfp4_options& opt) noexcept {
  if (!a.stochastic) return;
  const std::uint64_t g = nvfp4_groups(a.rows * a.cols);
  *opt.rng_offset = a.row_first + (a.col_data != nullptr ? 2 * g : g);
}

/// The tensor's encode scale S_enc and decode scale S_dec = 1 / S_enc, as the host computes them.
struct nvfp4_tensor_scales {
  float encode, decode;
};
TEQUANT_HD constexpr nvfp4_tensor_scales nvfp4_scales_from_amax(float amax) noexcept {
  const float s_enc = nvfp4_global_encode_scale(amax);
  return {s_enc, div_rn(1.0f, s_enc)};
}

/// max |x[i * stride]| over n elements, NaN ignored: the max of the sign-cleared bits (host_simd.hpp's
/// amax keys), so -0 counts as +0 and infinity wins.
template <class T>
TEQUANT_HD constexpr float nvfp4_strided_amax(const T* x, std::size_t n, std::size_t stride) noexcept {
  std::uint32_t m = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t a = float_bits(to_float(x[i * stride])) & 0x7FFFFFFFu;
    const std::uint32_t k = a > 0x7F800000u ? 0u : a;
    m = k > m ? k : m;
  }
  return bits_float(m);
}

/// The random word of element `e` of a stochastic-rounding stream (seed, first group): word e % 4 of
/// Philox group e / 4. Caches the last group, so a walk over consecutive elements runs Philox once per
/// four elements.
class nvfp4_random {
 public:
  TEQUANT_HD constexpr nvfp4_random(std::uint64_t seed, std::uint64_t first_group) noexcept
      : seed_(seed), first_(first_group) {}
  TEQUANT_HD constexpr std::uint32_t operator()(std::uint64_t e) noexcept {
    const std::uint64_t g = e / 4;
    if (g != group_) {
      words_ = philox_group(seed_, first_, g);
      group_ = g;
    }
    return words_[e % 4];
  }

 private:
  std::uint64_t seed_, first_;
  std::uint64_t group_ = ~std::uint64_t{0};
  philox_counter words_{};
};

/// Encodes n elements (n even) x[i * stride] * mult into packed codes: element i's code goes to the
/// nibble of stream element e0 + i (e0 even), byte (e0 + i) / 2 of `data`. Round to nearest, or
/// stochastically from `rnd` when it is non-null.
template <class T>
TEQUANT_HD constexpr void nvfp4_encode_run(const T* x, std::size_t n, std::size_t stride, float mult,
                                           std::uint8_t* data, std::uint64_t e0, nvfp4_random* rnd) noexcept {
  for (std::size_t i = 0; i < n; i += 2) {
    const float lo = to_float(x[i * stride]) * mult;
    const float hi = to_float(x[(i + 1) * stride]) * mult;
    const std::uint8_t clo = rnd != nullptr ? encode_e2m1_stochastic(lo, (*rnd)(e0 + i)) : encode_e2m1(lo);
    const std::uint8_t chi = rnd != nullptr ? encode_e2m1_stochastic(hi, (*rnd)(e0 + i + 1)) : encode_e2m1(hi);
    data[(e0 + i) / 2] = static_cast<std::uint8_t>(clo | (chi << 4));
  }
}

/// Tiles (and rowwise blocks) per row: ceil(cols / 16).
TEQUANT_HD constexpr std::size_t nvfp4_tile_cols(const nvfp4_cast_args& a) noexcept {
  return (a.cols + nvfp4_block - 1) / nvfp4_block;
}

/// The E4M3 code of 16x16 tile (mb, kb): the max over its (possibly partial) rows and columns.
template <class T>
TEQUANT_HD inline std::uint8_t nvfp4_tile_code(const nvfp4_cast_args& a, float s_enc, std::size_t mb,
                                               std::size_t kb) noexcept {
  const T* x = static_cast<const T*>(a.x);
  const std::size_t r0 = mb * nvfp4_block, c0 = kb * nvfp4_block;
  const std::size_t r1 = r0 + nvfp4_block < a.rows ? r0 + nvfp4_block : a.rows;
  const std::size_t c1 = c0 + nvfp4_block < a.cols ? c0 + nvfp4_block : a.cols;
  float m = 0.0f;
  for (std::size_t r = r0; r < r1; ++r) m = nan_ignoring_max(m, nvfp4_strided_amax(x + r * a.cols + c0, c1 - c0, 1));
  return nvfp4_block_scale(m, s_enc);
}

/// Rowwise block (m, kb): elements x[m, 16kb .. 16kb+15] (fewer at the right edge). Writes its scale
/// entry and its codes (stream elements m*cols + k).
template <class T>
TEQUANT_HD inline void nvfp4_rowwise_block(const nvfp4_cast_args& a, nvfp4_tensor_scales s, std::size_t m,
                                           std::size_t kb) noexcept {
  const T* row = static_cast<const T*>(a.x) + m * a.cols;
  const std::size_t c0 = kb * nvfp4_block;
  const std::size_t len = a.cols - c0 < nvfp4_block ? a.cols - c0 : nvfp4_block;
  const std::uint8_t code = a.tile_scale != nullptr ? a.tile_scale[(m / nvfp4_block) * nvfp4_tile_cols(a) + kb]
                                                    : nvfp4_block_scale(nvfp4_strided_amax(row + c0, len, 1), s.encode);
  a.row_scale[m * a.row_scale_cols + kb] = code;
  nvfp4_random rnd(a.seed, a.row_first);
  nvfp4_encode_run(row + c0, len, 1, nvfp4_block_multiplier(code, s.decode), a.row_data, m * a.cols + c0,
                   a.stochastic ? &rnd : nullptr);
}

/// Columnwise block (k, mb): elements x[16mb .. 16mb+15, k] (fewer at the bottom edge). Writes its
/// scale entry and its codes into the transposed data (stream elements k*rows + m).
template <class T>
TEQUANT_HD inline void nvfp4_columnwise_block(const nvfp4_cast_args& a, nvfp4_tensor_scales s, std::size_t k,
                                              std::size_t mb) noexcept {
  const T* col = static_cast<const T*>(a.x) + k;
  const std::size_t r0 = mb * nvfp4_block;
  const std::size_t len = a.rows - r0 < nvfp4_block ? a.rows - r0 : nvfp4_block;
  const std::uint8_t code = a.tile_scale != nullptr
                                ? a.tile_scale[mb * nvfp4_tile_cols(a) + k / nvfp4_block]
                                : nvfp4_block_scale(nvfp4_strided_amax(col + r0 * a.cols, len, a.cols), s.encode);
  a.col_scale[k * a.col_scale_cols + mb] = code;
  nvfp4_random rnd(a.seed, a.col_first);
  nvfp4_encode_run(col + r0 * a.cols, len, a.cols, nvfp4_block_multiplier(code, s.decode), a.col_data, k * a.rows + r0,
                   a.stochastic ? &rnd : nullptr);
}

/// Element (m, k) of a dequantized [rows, cols] direction: e2m1 * e4m3 block scale * global decode scale,
/// in the host's order. Columnwise data is [cols, rows] with scale entry (k, m/16).
TEQUANT_HD constexpr float nvfp4_dequantize_element(const std::uint8_t* q, std::size_t rows, std::size_t cols,
                                                    bool columnwise, const std::uint8_t* scale, std::size_t scale_cols,
                                                    float global_inv, std::size_t m, std::size_t k) noexcept {
  const std::size_t e = columnwise ? k * rows + m : m * cols + k;
  const std::uint8_t s = columnwise ? scale[k * scale_cols + m / nvfp4_block] : scale[m * scale_cols + k / nvfp4_block];
  const auto code = static_cast<std::uint8_t>((q[e / 2] >> ((e & 1) * 4)) & 0x0Fu);
  return decode_e2m1(code) * decode_e4m3(s) * global_inv;
}

}  // namespace tequant::detail
