// SPDX-License-Identifier: Apache-2.0
// The host (CPU) execution backend.
#pragma once
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <span>
#include <vector>

#include "tequant/backend/concepts.hpp"
#include "tequant/backend/host_allocator.hpp"
#include "tequant/backend/layouts.hpp"
#include "tequant/backend/plan_dispatch.hpp"
#include "tequant/backend/validate.hpp"
#include "tequant/detail/host_kernels.hpp"
#ifndef TEQUANT_SEPARATE_HOST_KERNELS
#  include "tequant/detail/host_nvfp4.hpp"
#  include "tequant/detail/host_nvfp4_rht.hpp"
#  include "tequant/detail/host_simd.hpp"
#endif
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/e8m0.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/half.hpp"
#include "tequant/format/scale.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace tequant {

namespace detail {

/// The input type's largest finite value: block scaling's replacement for an infinite scale.
template <class T>
constexpr float input_type_max() noexcept {
  if constexpr (std::is_same_v<T, bf16>) return bits_float(0x7F7F0000u);
  else if constexpr (std::is_same_v<T, fp16>) return 65504.0f;
  else return float_max;
}

template <class T>
inline constexpr bool host_input = std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

/// Calls f.template operator()<D>() with the dtype as a template argument.
template <class F>
decltype(auto) with_dtype(fp8_dtype d, F&& f) {
  if (d == fp8_dtype::e4m3) return f.template operator()<fp8_dtype::e4m3>();
  return f.template operator()<fp8_dtype::e5m2>();
}

inline float key_float(std::uint32_t k) noexcept { return bits_float(k); }

}  // namespace detail

/// CPU backend: buffers are std::vector (large ones on huge pages, see host_allocator), every
/// pointer is a host pointer.
struct host_backend {
  using policy_kind = backend_kind;
  static constexpr bool host_accessible = true;

  template <class T>
  using buffer = std::vector<T, host_allocator<T>>;

  /// n zeroed values.
  template <class T>
  buffer<T> make_buffer(std::size_t n) const { return buffer<T>(n); }

  template <class T>
  void copy(T* dst, const T* src, std::size_t n) const noexcept { if (n) std::memmove(dst, src, n * sizeof(T)); }
  template <class T>
  void download(T* host_dst, const T* src, std::size_t n) const noexcept { copy(host_dst, src, n); }
  template <class T>
  void upload(T* dst, const T* host_src, std::size_t n) const noexcept { copy(dst, host_src, n); }
  template <class T>
  void fill(T* dst, std::size_t n, T value) const noexcept { for (std::size_t i = 0; i < n; ++i) dst[i] = value; }
  template <class T>
  T read(const T* p) const noexcept { return *p; }

  /// *p = fmax(*p, v): the staging amax never goes down and NaN is ignored.
  void max_accumulate(float* p, float v) const noexcept { *p = detail::nan_ignoring_max(*p, v); }

  /// TE's fused delayed update over one bucket: one pass, O(1) memory per slot.
  template <class Algo>
  void update_delayed(const delayed_bucket_view& v, Algo algo, delayed_update_args args) const noexcept {
    delayed_update_bucket_host(v, algo, args);
  }

  // ---- the plan-taking entry points (what modules call) ---------------------------------------

  /// Casts x [rows, cols] as `plan` says (its scaling mode picks the kernel below) into `out`, whose
  /// spans have the sizes layout_of(plan, rows, cols) gives for the directions requested.
  template <class T>
    requires detail::host_input<T>
  void quantize(matrix_view<const T> x, const cast_plan& plan, const quantized_output& out) const {
    detail::quantize_with_plan(*this, x, plan, out);
  }

  /// Decodes one direction of a cast made with `plan` into out [rows, cols].
  void dequantize(const cast_plan& plan, std::size_t rows, std::size_t cols, const quantized_output& q, bool columnwise,
                  std::span<float> out) const {
    detail::dequantize_with_plan(*this, plan, rows, cols, q, columnwise, out);
  }

  // ---- per-tensor FP8 (delayed and current scaling) ---------------------------------------------

  /// *amax_out = max |x| over the non-NaN elements (0 for n == 0): current scaling's first pass.
  template <class T>
    requires detail::host_input<T>
  void amax(const T* x, std::size_t n, float* amax_out) const {
    detail::require(amax_out != nullptr && (n == 0 || x != nullptr), "host_backend::amax: null pointer (x or amax_out)");
    *amax_out = detail::amax_host(x, n);
  }

  /// scale = scale_from_amax(*amax, fp8_max(d), pow2, eps, FLT_MAX) (current scaling), and its inverse.
  void compute_scale(const float* amax, fp8_dtype d, bool power_2_scale, float amax_epsilon, float* scale_out,
                     float* scale_inv_out) const {
    detail::require(amax && scale_out, "host_backend::compute_scale: null pointer (amax or scale_out)");
    const float s = scale_from_amax(*amax, fp8_max(d), power_2_scale, amax_epsilon, detail::float_max);
    *scale_out = s;
    if (scale_inv_out) *scale_inv_out = scale_inverse(s);
  }

  /// out[i] = fp8(x[i] * *scale) (RNE, saturating, NaN -> NaN code); *scale_inv_out = 1 / *scale;
  /// when `amax` is non-null, max |x| (NaN ignored) is max-accumulated into *amax (never overwritten).
  template <class T>
    requires detail::host_input<T>
  void quantize_tensor(const T* x, std::size_t n, const float* scale, fp8_dtype d, std::uint8_t* out,
                       float* scale_inv_out, float* amax) const {
    detail::require(scale != nullptr, "host_backend::quantize_tensor: scale is null");
    detail::require(n == 0 || (x != nullptr && out != nullptr), "host_backend::quantize_tensor: null x or out for ", n,
                    " elements");
    const float s = *scale;
    std::uint32_t bits = 0;
    detail::with_dtype(d, [&]<fp8_dtype D>() { detail::scale_encode_host<D>(x, n, s, out, amax ? &bits : nullptr); });
    if (amax) *amax = detail::nan_ignoring_max(*amax, detail::key_float(bits));
    if (scale_inv_out) *scale_inv_out = scale_inverse(s);
  }

  /// Current scaling in one call: amax (written to *amax_out when non-null), scale, cast.
  template <class T>
    requires detail::host_input<T>
  void quantize_current(const T* x, std::size_t n, fp8_dtype d, bool power_2_scale, float amax_epsilon,
                        std::uint8_t* out, float* scale_inv_out, float* amax_out = nullptr) const {
    float a = 0.0f, s = 1.0f;
    amax(x, n, &a);
    compute_scale(&a, d, power_2_scale, amax_epsilon, &s, scale_inv_out);
    quantize_tensor(x, n, &s, d, out, nullptr, nullptr);
    if (amax_out) *amax_out = a;
  }

  /// x = decode(q) * *scale_inv.
  void dequantize_tensor(const std::uint8_t* q, std::size_t n, fp8_dtype d, const float* scale_inv, float* out) const {
    detail::require(scale_inv != nullptr && (n == 0 || (q && out)), "host_backend::dequantize_tensor: null pointer");
    const float si = *scale_inv;
    for (std::size_t i = 0; i < n; ++i) out[i] = decode_fp8(d, q[i]) * si;
  }

  // ---- MXFP8: E8M0 scale per 1x32 (rowwise) / 32x1 (columnwise) block, or per 32x32 tile ----------

  /// Quantizes x [M, K] (M and K multiples of 32). Requested directions are those with non-empty data
  /// spans. Scale tensors have TE's padded shapes (mxfp8_*_scale_shape); padding is written as 0.
  /// `tile_2d`: one scale per 32x32 tile shared by both directions (TE's 2D weight quantization).
  template <class T>
    requires detail::host_input<T>
  void quantize_mxfp8(matrix_view<const T> x, fp8_dtype d, bool tile_2d, const mxfp8_output& o) const {
    const detail::quantize_request r = detail::check_quantize_mxfp8(x.rows, x.cols, x.data, o);
    if (r.empty) return;
    detail::with_dtype(d, [&]<fp8_dtype D>() { mxfp8_impl<D>(x, tile_2d, o, r.row, r.col, r.rs, r.cs); });
  }

  /// Dequantizes MXFP8 data ([M, K], rowwise or columnwise scales) into out [M, K].
  void dequantize_mxfp8(std::span<const std::uint8_t> q, std::size_t M, std::size_t K, fp8_dtype d, bool columnwise,
                        std::span<const std::uint8_t> scale, std::span<float> out) const {
    const scale_shape ss = detail::check_dequantize_mxfp8(q.size(), M, K, columnwise, scale.size(), out.size());
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k = 0; k < K; ++k) {
        const std::uint8_t e = columnwise ? scale[(m / 32) * ss.cols + k] : scale[m * ss.cols + k / 32];
        out[m * K + k] = decode_fp8(d, q[m * K + k]) * decode_e8m0(e);
      }
  }

  // ---- FP8 block scaling: fp32 scale per 1x128 (activations, gradients) or 128x128 (weights) -------

  /// Quantizes x [M, K]. Partial tiles at the edges get their own scale (TE's ceil-divided scale
  /// shapes). Rowwise data is [M, K]; columnwise data is the transpose [K, M]. scale_inv = 1/scale in
  /// fp32; padding entries are written as 0. scale = scale_from_amax(tile amax, fp8_max, pow2, eps,
  /// largest finite value of T).
  template <class T>
    requires detail::host_input<T>
  void quantize_block(matrix_view<const T> x, fp8_dtype d, bool tile_2d, bool power_2_scale, float amax_epsilon,
                      const block_output& o) const {
    const detail::quantize_request r = detail::check_quantize_block(x.rows, x.cols, x.data, tile_2d, o);
    if (r.empty) return;
    detail::with_dtype(d, [&]<fp8_dtype D>() { block_impl<D>(x, tile_2d, power_2_scale, amax_epsilon, o, r.row, r.col, r.rs, r.cs); });
  }

  /// Dequantizes FP8 block data into out [M, K]; columnwise data is [K, M].
  void dequantize_block(std::span<const std::uint8_t> q, std::size_t M, std::size_t K, fp8_dtype d, bool tile_2d,
                        bool columnwise, std::span<const float> scale_inv, std::span<float> out) const {
    const scale_shape ss = detail::check_dequantize_block(q.size(), M, K, tile_2d, columnwise, scale_inv.size(), out.size());
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k = 0; k < K; ++k) {
        std::size_t si;
        if (tile_2d) si = columnwise ? (k / 128) * ss.cols + m / 128 : (m / 128) * ss.cols + k / 128;
        else si = columnwise ? (m / 128) * ss.cols + k : (k / 128) * ss.cols + m;
        const std::uint8_t b = columnwise ? q[k * M + m] : q[m * K + k];
        out[m * K + k] = decode_fp8(d, b) * scale_inv[si];
      }
  }

  // ---- NVFP4: E2M1 codes, E4M3 scale per 1x16 / 16x1 block (or 16x16 tile), fp32 global scale ------

  /// Quantizes x [M, K] (M and K even) as TE's NVFP4 kernels do: S_enc = 448*6 / amax(x), an E4M3 scale
  /// per block, E2M1 codes packed two a byte; columnwise data is the transpose [K, M]. Round to nearest,
  /// or stochastically when opt.rng_offset is set (which then advances). Padding written as 0. With
  /// opt.columnwise_rht the columnwise copy is quantized from TE's 16x16 random Hadamard transform.
  template <class T>
    requires detail::host_input<T>
  void quantize_nvfp4(matrix_view<const T> x, const nvfp4_options& opt, const nvfp4_output& o) const {
    const detail::quantize_request r = detail::check_quantize_nvfp4(x.rows, x.cols, x.data, o);
    if (r.empty) return;
    if (opt.columnwise_rht) detail::quantize_nvfp4_rht_host(x, opt, o, r.row, r.col, r.rs, r.cs);
    else detail::quantize_nvfp4_host(x, opt, o, r.row, r.col, r.rs, r.cs);
  }

  /// This backend has the random Hadamard transform of NVFP4's columnwise copies (plan_dispatch asks).
  static constexpr bool has_nvfp4_rht = true;

  /// Dequantizes one direction of NVFP4 data into out [M, K] (columnwise data is [K, M]). With
  /// `columnwise_rht`, columnwise data was cast from the transform and is transformed back (fp32).
  void dequantize_nvfp4(std::span<const std::uint8_t> q, std::size_t M, std::size_t K, bool columnwise,
                        std::span<const std::uint8_t> scale, std::span<const float> global_scale_inv,
                        std::span<float> out, bool columnwise_rht = false) const {
    const scale_shape ss = detail::check_dequantize_nvfp4(q.size(), M, K, columnwise, scale.size(),
                                                          global_scale_inv.size(), out.size());
    const bool inverse = columnwise && columnwise_rht;
    if (inverse) detail::check_nvfp4_rht("dequantize_nvfp4", M, false);
    if (M * K == 0) return;
    detail::dequantize_nvfp4_host(q.data(), M, K, columnwise, scale.data(), ss, global_scale_inv[0], out.data());
    if (inverse) detail::nvfp4_inverse_rht_host(out.data(), M, K);
  }

 private:
  template <fp8_dtype D, class T>
  static void mxfp8_impl(matrix_view<const T> x, bool tile_2d, const mxfp8_output& o, bool row, bool col,
                         scale_shape rs, scale_shape cs) {
    const std::size_t M = x.rows, K = x.cols, KB = K / 32;
    // The rowwise kernels can stream their codes, but measured slower for fp32 (5.1 -> 5.4 ms per 64 MiB;
    // docs/benchmarks.md). The columnwise ones stream when the whole output is large (measured faster
    // so, AVX-512 and AVX2 kernels alike: they write a chunk's rows in order).
    const bool stream = false;
    const bool col_stream = M * K >= detail::streaming_store_min_bytes;
    // Columnwise only: one call for the whole matrix, so each 32-row block's kernel prefetches the next.
    if (col && !row && !tile_2d) {
      std::memset(o.columnwise_scale.data(), 0, o.columnwise_scale.size());
      detail::mxfp8_columnwise_host<D>(x.data, M, K, o.columnwise_data.data(), o.columnwise_scale.data(), cs.cols,
                                       col_stream);
      return;
    }
    if (row) std::memset(o.rowwise_scale.data(), 0, o.rowwise_scale.size());
    if (col) std::memset(o.columnwise_scale.data(), 0, o.columnwise_scale.size());
    // Per-column scratch of the 32x32-tile path only; the 1D paths keep theirs in registers.
    std::vector<std::uint32_t> colmax(tile_2d ? K : 0);
    std::vector<float> mult(tile_2d ? K : 0);
    std::vector<std::uint8_t> code(tile_2d ? K : 0);
    for (std::size_t mb = 0; mb < M / 32; ++mb) {
      const T* blk = x.data + mb * 32 * K;
      if (tile_2d) {
        std::fill(colmax.begin(), colmax.end(), 0u);
        for (std::size_t r = 0; r < 32; ++r) detail::column_amax_host(blk + r * K, K, colmax.data());
        for (std::size_t kb = 0; kb < KB; ++kb) {
          std::uint32_t m = 0;
          for (std::size_t c = 0; c < 32; ++c) m = colmax[kb * 32 + c] > m ? colmax[kb * 32 + c] : m;
          const std::uint8_t e = detail::mxfp8_code<D>(m);
          for (std::size_t c = 0; c < 32; ++c) {
            code[kb * 32 + c] = e;
            mult[kb * 32 + c] = e8m0_cast_multiplier(e);
          }
        }
        for (std::size_t r = 0; r < 32; ++r) {
          const std::size_t m = mb * 32 + r;
          std::uint8_t* dst = row ? o.rowwise_data.data() + m * K : o.columnwise_data.data() + m * K;
          detail::scale_encode_each_host<D>(blk + r * K, K, mult.data(), dst);
          if (row && col) std::memcpy(o.columnwise_data.data() + m * K, dst, K);
          if (row)
            for (std::size_t kb = 0; kb < KB; ++kb) o.rowwise_scale[m * rs.cols + kb] = code[kb * 32];
        }
        if (col) std::memcpy(o.columnwise_scale.data() + mb * cs.cols, code.data(), K);
        continue;
      }
      if (row)
        detail::mxfp8_rowwise_host<D>(blk, 32, K, o.rowwise_data.data() + mb * 32 * K, o.rowwise_scale.data() + mb * 32 * rs.cols,
                                      rs.cols, stream);
      if (col)
        detail::mxfp8_columnwise_host<D>(blk, 32, K, o.columnwise_data.data() + mb * 32 * K, o.columnwise_scale.data() + mb * cs.cols,
                                         cs.cols, col_stream);
    }
  }

  template <fp8_dtype D, class T>
  static void block_impl(matrix_view<const T> x, bool tile_2d, bool pow2, float eps, const block_output& o, bool row,
                         bool col, scale_shape rs, scale_shape cs) {
    const std::size_t M = x.rows, K = x.cols, KB = detail::ceil_div(K, 128);
    constexpr float fmax = fp8_max(D);
    constexpr float vinf = detail::input_type_max<T>();
    if (row) std::fill(o.rowwise_scale_inv.begin(), o.rowwise_scale_inv.end(), 0.0f);
    if (col) std::fill(o.columnwise_scale_inv.begin(), o.columnwise_scale_inv.end(), 0.0f);
    // Each kernel call writes one 128-row block; the whole output decides whether they stream.
    const bool stream = M * K >= detail::streaming_store_min_bytes;
    if (tile_2d && row && !col) {
      // 128x128 tiles, rowwise only: one call for the whole matrix, which overlaps the amax pass of
      // each row block with the cast of the one before.
      const std::size_t MB = detail::ceil_div(M, 128);
      std::vector<float> tile_scale(MB * KB);
      detail::block_2d_host<D>(x.data, M, K, o.rowwise_data.data(), tile_scale.data(), pow2, eps, vinf, stream);
      for (std::size_t mb = 0; mb < MB; ++mb)
        for (std::size_t kb = 0; kb < KB; ++kb) o.rowwise_scale_inv[mb * rs.cols + kb] = 1.0f / tile_scale[mb * KB + kb];
      return;
    }
    // 128x128 tiles with the columnwise copy: the tile kernel a row block at a time for 16-bit inputs;
    // fp32 keeps the per-column path below, which measured faster for it (docs/benchmarks.md).
    const bool tile_kernel = tile_2d && sizeof(T) == 2;
    std::vector<std::uint32_t> colmax(tile_kernel ? 0 : K);
    std::vector<float> scale(tile_kernel ? KB : K);
    // The codes of a 128-row block when only the (transposed) columnwise copy is wanted.
    std::vector<std::uint8_t> tmp(tile_kernel ? (row ? 0 : 128 * K) : K);
    for (std::size_t mb = 0; mb * 128 < M; ++mb) {
      const std::size_t r0 = mb * 128, nr = M - r0 < 128 ? M - r0 : 128;
      const T* blk = x.data + r0 * K;
      if (tile_kernel) {
        // Both directions share the tiles' scales, so the columnwise copy is the transposed codes.
        std::uint8_t* dst = row ? o.rowwise_data.data() + r0 * K : tmp.data();
        // Not streamed: the transpose reads the codes back right away.
        detail::block_2d_host<D>(blk, nr, K, dst, scale.data(), pow2, eps, vinf, false);
        for (std::size_t kb = 0; kb < KB; ++kb) {
          const float si = 1.0f / scale[kb];
          if (row) o.rowwise_scale_inv[mb * rs.cols + kb] = si;
          if (col) o.columnwise_scale_inv[kb * cs.cols + mb] = si;
        }
        if (col)
          for (std::size_t r = 0; r < nr; ++r) scatter_column(o.columnwise_data.data(), M, r0 + r, dst + r * K, K);
        continue;
      }
      if (tile_2d || col) {
        std::fill(colmax.begin(), colmax.end(), 0u);
        for (std::size_t r = 0; r < nr; ++r) detail::column_amax_host(blk + r * K, K, colmax.data());
      }
      if (tile_2d) {
        for (std::size_t kb = 0; kb < KB; ++kb) {
          const std::size_t c1 = (kb + 1) * 128 < K ? (kb + 1) * 128 : K;
          std::uint32_t m = 0;
          for (std::size_t c = kb * 128; c < c1; ++c) m = colmax[c] > m ? colmax[c] : m;
          const float s = scale_from_amax(detail::bits_float(m), fmax, pow2, eps, vinf);
          const float si = 1.0f / s;
          for (std::size_t c = kb * 128; c < c1; ++c) scale[c] = s;
          if (row) o.rowwise_scale_inv[mb * rs.cols + kb] = si;
          if (col) o.columnwise_scale_inv[kb * cs.cols + mb] = si;
        }
        for (std::size_t r = 0; r < nr; ++r) {
          std::uint8_t* dst = row ? o.rowwise_data.data() + (r0 + r) * K : tmp.data();
          detail::scale_encode_each_host<D>(blk + r * K, K, scale.data(), dst);
          if (col) scatter_column(o.columnwise_data.data(), M, r0 + r, dst, K);
        }
        continue;
      }
      if (row)
        detail::block_rowwise_host<D>(blk, nr, K, o.rowwise_data.data() + r0 * K, o.rowwise_scale_inv.data() + r0, rs.cols,
                                      pow2, eps, vinf, stream);
      if (col) {
        for (std::size_t k = 0; k < K; ++k) {
          scale[k] = scale_from_amax(detail::bits_float(colmax[k]), fmax, pow2, eps, vinf);
          o.columnwise_scale_inv[mb * cs.cols + k] = 1.0f / scale[k];
        }
        for (std::size_t r = 0; r < nr; ++r) {
          detail::scale_encode_each_host<D>(blk + r * K, K, scale.data(), tmp.data());
          scatter_column(o.columnwise_data.data(), M, r0 + r, tmp.data(), K);
        }
      }
    }
  }

  // Row m of the [M, K] codes becomes column m of the transposed [K, M] output.
  static void scatter_column(std::uint8_t* out_t, std::size_t M, std::size_t m, const std::uint8_t* src, std::size_t K) {
    for (std::size_t k = 0; k < K; ++k) out_t[k * M + m] = src[k];
  }
};

static_assert(execution_backend<host_backend>);

}  // namespace tequant
