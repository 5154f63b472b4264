// SPDX-License-Identifier: Apache-2.0
// cuda_backend: the host backend's API on device pointers, every operation enqueued on one stream.
// Nothing here synchronises with the host except download/upload/read, so a forward update or a
// backward flush (collective + update_delayed) can be captured into a CUDA graph.
#pragma once
#if !defined(__CUDACC__)
#  error "tequant: <tequant/backend/cuda/backend.cuh> needs a CUDA compiler (nvcc); host code includes <tequant/tequant.hpp>"
#endif

#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

#include "tequant/backend/concepts.hpp"
#include "tequant/backend/cuda/block_kernels.cuh"
#include "tequant/backend/cuda/buffer.cuh"
#include "tequant/backend/cuda/check.cuh"
#include "tequant/backend/cuda/dequantize_kernel.cuh"
#include "tequant/backend/cuda/nvfp4_kernels.cuh"
#include "tequant/backend/cuda/tensor_kernels.cuh"
#include "tequant/backend/cuda/update_kernel.cuh"
#include "tequant/backend/cuda/vector.cuh"
#include "tequant/backend/layouts.hpp"
#include "tequant/backend/plan_dispatch.hpp"
#include "tequant/backend/validate.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/error.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/hadamard.hpp"
#include "tequant/format/half.hpp"
#include "tequant/policy.hpp"
#include "tequant/recipe/delayed_state.hpp"

namespace tequant {

namespace detail {

/// An NVTX range for the lifetime of a scope (header-only nvtx3: no library to link).
class nvtx_range {
 public:
  explicit nvtx_range(const char* name) noexcept { nvtxRangePushA(name); }
  ~nvtx_range() { nvtxRangePop(); }
  nvtx_range(const nvtx_range&) = delete;
  nvtx_range& operator=(const nvtx_range&) = delete;
};

template <class T>
inline constexpr bool is_quantizable_input = std::is_same_v<T, float> || std::is_same_v<T, bf16> || std::is_same_v<T, fp16>;

/// Largest finite value of the input type: block scaling's value for an infinite scale (TE's
/// compute_scale_from_types). Named apart from host.hpp's copy so both headers can share a TU.
template <class T>
constexpr float cuda_input_type_max() noexcept {
  if constexpr (std::is_same_v<T, bf16>) return bits_float(0x7F7F0000u);  // 0x1.FEp127
  else if constexpr (std::is_same_v<T, fp16>) return 65504.0f;
  else return float_max;
}

}  // namespace detail

/// The CUDA execution backend. Cheap to copy (a stream handle); all pointers are device pointers.
class cuda_backend {
 public:
  using policy_kind = backend_kind;
  static constexpr bool host_accessible = false;

  template <class T>
  using buffer = device_buffer<T>;

  /// Work goes to the legacy default stream.
  cuda_backend() noexcept = default;
  /// Work goes to `stream`.
  explicit cuda_backend(cudaStream_t stream) noexcept : stream_(stream) {}

  cudaStream_t stream() const noexcept { return stream_; }

  // ---- storage ------------------------------------------------------------------------------------

  /// n zeroed values in device memory (zeroed in stream order).
  template <class T>
  buffer<T> make_buffer(std::size_t n) const {
    buffer<T> b(n);
    if (n != 0) detail::check(cudaMemsetAsync(b.data(), 0, n * sizeof(T), stream_), "cudaMemsetAsync(make_buffer)");
    return b;
  }

  template <class T>
  void copy(T* dst, const T* src, std::size_t n) const {
    if (n != 0) detail::check(cudaMemcpyAsync(dst, src, n * sizeof(T), cudaMemcpyDeviceToDevice, stream_), "cudaMemcpyAsync(copy)");
  }
  /// Device to host; returns when the values are on the host (synchronises the stream).
  template <class T>
  void download(T* host_dst, const T* src, std::size_t n) const {
    if (n == 0) return;
    detail::check(cudaMemcpyAsync(host_dst, src, n * sizeof(T), cudaMemcpyDeviceToHost, stream_), "cudaMemcpyAsync(download)");
    detail::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(download)");
  }
  /// Host to device; returns when `host_src` may be reused (synchronises the stream).
  template <class T>
  void upload(T* dst, const T* host_src, std::size_t n) const {
    if (n == 0) return;
    detail::check(cudaMemcpyAsync(dst, host_src, n * sizeof(T), cudaMemcpyHostToDevice, stream_), "cudaMemcpyAsync(upload)");
    detail::check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize(upload)");
  }
  template <class T>
  void fill(T* dst, std::size_t n, T value) const {
    if (n == 0) return;
    const auto blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096));
    detail::fill_kernel<T><<<blocks, 256, 0, stream_>>>(dst, n, value);
    detail::check_launch("fill_kernel");
  }
  /// One value to the host (a synchronisation: tests and statistics only).
  template <class T>
  T read(const T* p) const {
    T v{};
    download(&v, p, 1);
    return v;
  }
  /// *p = fmax(*p, v) in stream order: NaN ignored, never lowers the value.
  void max_accumulate(float* p, float v) const {
    detail::max_accumulate_kernel<<<1, 1, 0, stream_>>>(p, v);
    detail::check_launch("max_accumulate_kernel");
  }

  // ---- delayed scaling update -------------------------------------------------------------------

  /// TE's fused update of one bucket: one launch, one thread per slot.
  template <class Algo>
  void update_delayed(const delayed_bucket_view& v, Algo algo, delayed_update_args args) const {
    update_delayed_all(std::span<const delayed_bucket_view>(&v, 1), std::span<const delayed_update_args>(&args, 1), algo,
                       "tequant::update_delayed");
  }

  /// Every bucket of one direction in one launch (up to detail::update_max_buckets buckets per launch),
  /// inside an NVTX range named after the direction. No host synchronisation: graph-capturable.
  template <class Algo>
  void update_delayed(std::span<const delayed_bucket_view> views, std::span<const delayed_update_args> args, Algo algo,
                      direction d) const {
    update_delayed_all(views, args, algo,
                       d == direction::forward ? "tequant::update_delayed forward" : "tequant::update_delayed backward");
  }

  // ---- the plan-taking entry points (what modules call) ---------------------------------------

  /// Casts x [rows, cols] (device memory) as `plan` says into `out` (device memory); see host_backend.
  template <class T>
    requires detail::is_quantizable_input<T>
  void quantize(matrix_view<const T> x, const cast_plan& plan, const quantized_output& out) const {
    detail::quantize_with_plan(*this, x, plan, out);
  }

  /// Decodes one direction of a cast made with `plan` into out [rows, cols] (device memory).
  void dequantize(const cast_plan& plan, std::size_t rows, std::size_t cols, const quantized_output& q, bool columnwise,
                  std::span<float> out) const {
    detail::dequantize_with_plan(*this, plan, rows, cols, q, columnwise, out);
  }

  // ---- per-tensor FP8 (delayed and current scaling) -----------------------------------------------

  /// out[i] = fp8(x[i] * *scale) (RNE, saturating); *scale_inv_out = 1 / *scale (when given); max |x|
  /// (NaN ignored) is max-accumulated into *amax (when given, never overwritten) by the same pass.
  template <class T>
    requires detail::is_quantizable_input<T>
  void quantize_tensor(const T* x, std::size_t n, const float* scale, fp8_dtype d, std::uint8_t* out,
                       float* scale_inv_out, float* amax) const {
    detail::require(scale != nullptr, "cuda_backend::quantize_tensor: scale is null");
    detail::require(n == 0 || (x != nullptr && out != nullptr), "cuda_backend::quantize_tensor: null x or out for ", n,
                    " elements");
    detail::tensor_kernel_args a{x, n, 0, 0, scale, out, scale_inv_out, amax, d};
    detail::split_for_vectors(x, out, n, a.head, a.vecs);
    launch_tensor<T, true>(a, "tensor_kernel(quantize)");
  }

  /// *amax_out = max |x| over the non-NaN elements (0 for n == 0): current scaling's first pass.
  template <class T>
    requires detail::is_quantizable_input<T>
  void amax(const T* x, std::size_t n, float* amax_out) const {
    detail::require(amax_out != nullptr && (n == 0 || x != nullptr), "cuda_backend::amax: null pointer (x or amax_out)");
    detail::check(cudaMemsetAsync(amax_out, 0, sizeof(float), stream_), "cudaMemsetAsync(amax)");
    detail::tensor_kernel_args a{x, n, 0, 0, nullptr, nullptr, nullptr, amax_out, fp8_dtype::e4m3};
    detail::split_for_vectors<T>(x, nullptr, n, a.head, a.vecs);
    launch_tensor<T, false>(a, "tensor_kernel(amax)");
  }

  /// scale = scale_from_amax(*amax, fp8_max(d), pow2, eps, FLT_MAX) and its inverse, computed on the
  /// device so that nothing waits for the amax on the host.
  void compute_scale(const float* amax, fp8_dtype d, bool power_2_scale, float amax_epsilon, float* scale_out,
                     float* scale_inv_out) const {
    detail::require(amax && scale_out, "cuda_backend::compute_scale: null pointer (amax or scale_out)");
    detail::scale_from_amax_kernel<<<1, 1, 0, stream_>>>(
        {amax, scale_out, scale_inv_out, fp8_max(d), amax_epsilon, detail::float_max, power_2_scale});
    detail::check_launch("scale_from_amax_kernel");
  }

  /// Current scaling in one call and no host synchronisation: amax pass, device-side scale, cast.
  /// The amax and scale live in stream-ordered scratch (cudaMallocAsync), so this is capturable too.
  template <class T>
    requires detail::is_quantizable_input<T>
  void quantize_current(const T* x, std::size_t n, fp8_dtype d, bool power_2_scale, float amax_epsilon,
                        std::uint8_t* out, float* scale_inv_out, float* amax_out = nullptr) const {
    float* scratch = nullptr;
    detail::check(cudaMallocAsync(reinterpret_cast<void**>(&scratch), 2 * sizeof(float), stream_),
                  "cudaMallocAsync(quantize_current scratch)");
    try {
      float* a = amax_out != nullptr ? amax_out : scratch;
      amax(x, n, a);
      compute_scale(a, d, power_2_scale, amax_epsilon, scratch + 1, scale_inv_out);
      quantize_tensor(x, n, scratch + 1, d, out, nullptr, nullptr);
    } catch (...) {
      (void)cudaFreeAsync(scratch, stream_);
      throw;
    }
    detail::check(cudaFreeAsync(scratch, stream_), "cudaFreeAsync(quantize_current scratch)");
  }

  /// x = decode(q) * *scale_inv.
  void dequantize_tensor(const std::uint8_t* q, std::size_t n, fp8_dtype d, const float* scale_inv, float* out) const {
    detail::require(scale_inv != nullptr && (n == 0 || (q && out)), "cuda_backend::dequantize_tensor: null pointer");
    if (n == 0) return;
    detail::dequantize_args a{q, out, n, 1, d, detail::dequantize_args::per_tensor, scale_inv, 0, 0};
    launch_dequantize(a);
  }

  /// Dequantizes MXFP8 data ([M, K], rowwise or columnwise scales) into out [M, K].
  void dequantize_mxfp8(std::span<const std::uint8_t> q, std::size_t M, std::size_t K, fp8_dtype d, bool columnwise,
                        std::span<const std::uint8_t> scale, std::span<float> out) const {
    const scale_shape ss = detail::check_dequantize_mxfp8(q.size(), M, K, columnwise, scale.size(), out.size());
    if (M * K == 0) return;
    detail::dequantize_args a{q.data(), out.data(), M, K, d,
                              columnwise ? detail::dequantize_args::mxfp8_col : detail::dequantize_args::mxfp8_row,
                              scale.data(), ss.cols, 0};
    launch_dequantize(a);
  }

  /// Dequantizes FP8 block data into out [M, K]; columnwise data is [K, M].
  void dequantize_block(std::span<const std::uint8_t> q, std::size_t M, std::size_t K, fp8_dtype d, bool tile_2d,
                        bool columnwise, std::span<const float> scale_inv, std::span<float> out) const {
    const scale_shape ss = detail::check_dequantize_block(q.size(), M, K, tile_2d, columnwise, scale_inv.size(), out.size());
    if (M * K == 0) return;
    using k = detail::dequantize_args;
    detail::dequantize_args a{q.data(), out.data(), M, K, d,
                              tile_2d ? (columnwise ? k::block2d_col : k::block2d_row) : (columnwise ? k::block1d_col : k::block1d_row),
                              scale_inv.data(), ss.cols, 0};
    launch_dequantize(a);
  }

  // ---- MXFP8 and FP8 block scaling ---------------------------------------------------------------

  /// MXFP8: E8M0 scale per 1x32 (rowwise) and 32x1 (columnwise) block, or per 32x32 tile when
  /// `tile_2d` (shared by both outputs). M and K multiples of 32; TE's padded scale shapes, padding
  /// written as 0. Same checks and messages as host_backend.
  template <class T>
    requires detail::is_quantizable_input<T>
  void quantize_mxfp8(matrix_view<const T> x, fp8_dtype d, bool tile_2d, const mxfp8_output& o) const {
    const std::size_t M = x.rows, K = x.cols;
    const auto [empty, row, col, rs, cs] = detail::check_quantize_mxfp8(M, K, x.data, o);
    if (empty) return;
    // Only after every check passed, so that a rejected call writes nothing.
    if (row) zero_padding(o.rowwise_scale.data(), rs.size(), M * (K / 32));
    if (col) zero_padding(o.columnwise_scale.data(), cs.size(), (M / 32) * K);
    detail::block_kernel_args a = base_block_args(x, d);
    a.e8m0 = true;
    a.two_d = tile_2d;
    a.rcp_fp8_max = 1.0f / fp8_max(d);  // TE multiplies by the fp32 reciprocal
    if (row) {  // entry (m, k/32)
      a.row_data = o.rowwise_data.data();
      a.row_scale = o.rowwise_scale.data();
      a.row_scale_rstride = rs.cols;
      a.row_scale_bstride = 1;
    }
    if (col) {  // entry (m/32, k)
      a.col_data = o.columnwise_data.data();
      a.col_scale = o.columnwise_scale.data();
      a.col_scale_bstride = cs.cols;
      a.col_scale_cstride = 1;
    }
    a.vec_ok = vec_aligned<T>(a);
    if (col || tile_2d) {
      launch_block<T, 32, 32, false>(a, "block_kernel(mxfp8)");
    } else {
      launch_block<T, 32, 16, false>(a, "block_kernel(mxfp8, rowwise)");
    }
  }

  /// FP8 block scaling: fp32 scale_inv per 1x128 (rowwise) / 128x1 (columnwise, data transposed to
  /// [K, M]) block, or per 128x128 tile when `tile_2d`; partial edge tiles get their own scale; padding
  /// written as 0. Same checks and messages as host_backend.
  template <class T>
    requires detail::is_quantizable_input<T>
  void quantize_block(matrix_view<const T> x, fp8_dtype d, bool tile_2d, bool power_2_scale, float amax_epsilon,
                      const block_output& o) const {
    const std::size_t M = x.rows, K = x.cols;
    const auto [empty, row, col, rs, cs] = detail::check_quantize_block(M, K, x.data, tile_2d, o);
    if (empty) return;
    const std::size_t MB = detail::ceil_div(M, 128), KB = detail::ceil_div(K, 128);
    // Only after every check passed, so that a rejected call writes nothing.
    if (row) zero_padding(o.rowwise_scale_inv.data(), rs.size(), tile_2d ? MB * KB : KB * M);
    if (col) zero_padding(o.columnwise_scale_inv.data(), cs.size(), tile_2d ? MB * KB : MB * K);
    detail::block_kernel_args a = base_block_args(x, d);
    a.e8m0 = false;
    a.two_d = tile_2d;
    a.power_2 = power_2_scale;
    a.inv_in_double = false;  // float(1.0 / double(s)) == 1.0f / s for every float s: no double rounding for division
    a.epsilon = amax_epsilon;
    a.value_for_inf = detail::cuda_input_type_max<T>();
    if (row) {
      a.row_data = o.rowwise_data.data();
      a.row_scale = o.rowwise_scale_inv.data();
      if (tile_2d) {  // entry (m/128, k/128)
        a.row_scale_rdiv = 128;
        a.row_scale_rstride = rs.cols;
        a.row_scale_bstride = 1;
      } else {        // entry (k/128, m)
        a.row_scale_rstride = 1;
        a.row_scale_bstride = rs.cols;
      }
    }
    if (col) {
      a.col_data = o.columnwise_data.data();
      a.col_scale = o.columnwise_scale_inv.data();
      if (tile_2d) {  // entry (k/128, m/128)
        a.col_scale_bstride = 1;
        a.col_scale_cdiv = 128;
        a.col_scale_cstride = cs.cols;
      } else {        // entry (m/128, k)
        a.col_scale_bstride = cs.cols;
        a.col_scale_cstride = 1;
      }
    }
    a.vec_ok = vec_aligned<T>(a);
    if (col || tile_2d) {
      launch_block<T, 128, 128, true>(a, "block_kernel(block)");
    } else {
      launch_block<T, 128, 16, false>(a, "block_kernel(block, rowwise)");
    }
  }

  // ---- NVFP4 ------------------------------------------------------------------------------------

  /// NVFP4 as host_backend::quantize_nvfp4, byte for byte: S_enc = 448*6 / amax(x), an E4M3 scale per
  /// 1x16 / 16x1 block (16x16 tile with opt.tile_2d), E2M1 codes two a byte, columnwise data the
  /// transpose [K, M]; stochastic rounding from the same Philox stream as the host when opt.rng_offset
  /// is set (a host pointer, advanced here like the host does). Padding written as 0. With
  /// opt.columnwise_rht the columnwise copy is cast from TE's 16x16 random Hadamard transform of each
  /// column's 16-row groups (rows a multiple of 16, no tile_2d): an amax pass over the transformed values,
  /// then the cast, both through the host's per-group functions. Scratch for the amaxes (and tile codes)
  /// is stream-ordered (cudaMallocAsync), so the cast needs no host synchronisation.
  template <class T>
    requires detail::is_quantizable_input<T>
  void quantize_nvfp4(matrix_view<const T> x, const nvfp4_options& opt, const nvfp4_output& o) const {
    const auto [empty, row, col, rs, cs] = detail::check_quantize_nvfp4(x.rows, x.cols, x.data, o);
    if (empty) return;
    const bool rht = col && opt.columnwise_rht;
    if (rht) detail::check_nvfp4_rht("quantize_nvfp4", x.rows, opt.tile_2d);
    const std::size_t M = x.rows, K = x.cols, n = M * K;
    const std::size_t MB = detail::ceil_div(M, nvfp4_block), KB = detail::ceil_div(K, nvfp4_block);
    detail::nvfp4_cast_args a = detail::nvfp4_make_cast_args(x.data, M, K, opt, o, rs, cs);
    const std::size_t tiles = opt.tile_2d ? MB * KB : 0;
    void* scratch = nullptr;  // the amax (a float), the transformed amax's key (an unsigned), the tile codes
    constexpr std::size_t tiles_at = sizeof(float) + sizeof(unsigned);
    detail::check(cudaMallocAsync(&scratch, tiles_at + tiles, stream_), "cudaMallocAsync(quantize_nvfp4 scratch)");
    try {
      float* amax_d = static_cast<float*>(scratch);
      if (row || !rht) amax(x.data, n, amax_d);  // NaN ignored, as the host's pass 1
      if (opt.tile_2d) {
        a.tile_scale = static_cast<std::uint8_t*>(scratch) + tiles_at;
        detail::nvfp4_tile_kernel<T><<<grid_for(tiles), detail::nvfp4_threads, 0, stream_>>>(a, amax_d);
        detail::check_launch("nvfp4_tile_kernel");
      }
      if (row) {
        zero_padding(a.row_scale, rs.size(), M * KB);
        detail::nvfp4_rowwise_kernel<T><<<grid_for(M * KB), detail::nvfp4_threads, 0, stream_>>>(
            a, amax_d, o.rowwise_global_scale_inv.data());
        detail::check_launch("nvfp4_rowwise_kernel");
      }
      if (rht) {
        zero_padding(a.col_scale, cs.size(), MB * K);
        auto* key_d = reinterpret_cast<unsigned*>(static_cast<std::uint8_t*>(scratch) + sizeof(float));
        detail::check(cudaMemsetAsync(key_d, 0, sizeof(unsigned), stream_), "cudaMemsetAsync(quantize_nvfp4 amax)");
        const std::size_t groups = detail::nvfp4_rht_groups(a);
        detail::nvfp4_rht_amax_kernel<T><<<grid_for(groups), detail::nvfp4_threads, 0, stream_>>>(a, key_d);
        detail::check_launch("nvfp4_rht_amax_kernel");
        detail::nvfp4_rht_columnwise_kernel<T><<<grid_for(groups), detail::nvfp4_threads, 0, stream_>>>(
            a, key_d, o.columnwise_global_scale_inv.data());
        detail::check_launch("nvfp4_rht_columnwise_kernel");
      } else if (col) {
        zero_padding(a.col_scale, cs.size(), MB * K);
        detail::nvfp4_columnwise_kernel<T><<<grid_for(MB * K), detail::nvfp4_threads, 0, stream_>>>(
            a, amax_d, o.columnwise_global_scale_inv.data());
        detail::check_launch("nvfp4_columnwise_kernel");
      }
    } catch (...) {
      (void)cudaFreeAsync(scratch, stream_);
      throw;
    }
    detail::check(cudaFreeAsync(scratch, stream_), "cudaFreeAsync(quantize_nvfp4 scratch)");
    detail::nvfp4_advance_stream(a, opt);
  }

  /// This backend has the random Hadamard transform of NVFP4's columnwise copies (plan_dispatch asks).
  static constexpr bool has_nvfp4_rht = true;

  /// Dequantizes one direction of NVFP4 data into out [M, K] (columnwise data is [K, M]); see host_backend.
  /// With `columnwise_rht`, columnwise data was cast from the transform and is transformed back (fp32,
  /// the host's per-group function).
  void dequantize_nvfp4(std::span<const std::uint8_t> q, std::size_t M, std::size_t K, bool columnwise,
                        std::span<const std::uint8_t> scale, std::span<const float> global_scale_inv,
                        std::span<float> out, bool columnwise_rht = false) const {
    const scale_shape ss = detail::check_dequantize_nvfp4(q.size(), M, K, columnwise, scale.size(),
                                                          global_scale_inv.size(), out.size());
    const bool inverse = columnwise && columnwise_rht;
    if (inverse) detail::check_nvfp4_rht("dequantize_nvfp4", M, false);
    if (M * K == 0) return;
    const detail::nvfp4_dequantize_args a{q.data(), M, K, columnwise, scale.data(), ss.cols, global_scale_inv.data(),
                                          out.data()};
    detail::nvfp4_dequantize_kernel<<<grid_for(M * K), detail::nvfp4_threads, 0, stream_>>>(a);
    detail::check_launch("nvfp4_dequantize_kernel");
    if (inverse) {
      detail::nvfp4_rht_inverse_kernel<<<grid_for(M / hadamard_size * K), detail::nvfp4_threads, 0, stream_>>>(
          out.data(), M, K);
      detail::check_launch("nvfp4_rht_inverse_kernel");
    }
  }

 private:
  template <class Algo>
  void update_delayed_all(std::span<const delayed_bucket_view> views, std::span<const delayed_update_args> args, Algo,
                          const char* range) const {
    detail::require(views.size() == args.size(), "cuda_backend::update_delayed: ", views.size(), " buckets but ",
                    args.size(), " argument sets");
    const detail::nvtx_range nvtx(range);
    for (std::size_t first = 0; first < views.size(); first += detail::update_max_buckets) {
      detail::delayed_update_batch batch{};
      const std::size_t count = std::min<std::size_t>(views.size() - first, detail::update_max_buckets);
      batch.buckets = static_cast<std::uint32_t>(count);
      std::uint64_t slots = 0;
      for (std::size_t b = 0; b < count; ++b) {
        batch.first_slot[b] = static_cast<std::uint32_t>(slots);
        batch.views[b] = views[first + b];
        batch.args[b] = args[first + b];
        slots += views[first + b].slots;
      }
      detail::require(slots < (1ull << 31), "cuda_backend::update_delayed: ", slots, " slots in one launch (limit 2^31)");
      batch.first_slot[count] = static_cast<std::uint32_t>(slots);
      if (slots == 0) continue;
      const auto blocks = static_cast<unsigned>((slots + detail::update_threads - 1) / detail::update_threads);
      detail::delayed_update_kernel<Algo><<<blocks, detail::update_threads, 0, stream_>>>(batch);
      detail::check_launch("delayed_update_kernel");
    }
  }

  // TE's scale tensors are padded; the padding reads as 0 (as host_backend writes it).
  template <class S>
  void zero_padding(S* scale, std::size_t padded, std::size_t used) const {
    if (padded != used)
      detail::check(cudaMemsetAsync(scale, 0, padded * sizeof(S), stream_), "cudaMemsetAsync(scale padding)");
  }

  void launch_dequantize(const detail::dequantize_args& a) const {
    const std::size_t n = a.rows * a.cols;
    const auto blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 65535));
    detail::dequantize_kernel<<<blocks, 256, 0, stream_>>>(a);
    detail::check_launch("dequantize_kernel");
  }

  // Blocks of nvfp4_threads for `items` one-thread items; the kernels' grid-stride loops cover the rest.
  static unsigned grid_for(std::size_t items) {
    return static_cast<unsigned>(std::min<std::size_t>((items + detail::nvfp4_threads - 1) / detail::nvfp4_threads,
                                                       std::size_t{1} << 20));
  }

  int sm_count() const {
    if (sm_count_ == 0) {
      int dev = 0;
      detail::check(cudaGetDevice(&dev), "cudaGetDevice");
      detail::check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, dev),
                    "cudaDeviceGetAttribute(multiprocessor count)");
    }
    return sm_count_;
  }

  template <class T, bool Quantize>
  void launch_tensor(const detail::tensor_kernel_args& a, const char* name) const {
    if (a.n == 0) {
      // Nothing to cast, but the scale_inv is still bound to the (empty) output, and the host
      // max-accumulates the empty amax (+0) into *amax, which turns a NaN or negative staging value
      // into +0: one block does both.
      if ((Quantize && a.scale_inv != nullptr) || a.amax != nullptr) {
        detail::tensor_kernel<T, Quantize><<<1, detail::tensor_threads, 0, stream_>>>(a);
        detail::check_launch(name);
      }
      return;
    }
    constexpr std::size_t per_block = static_cast<std::size_t>(detail::tensor_threads) * detail::vec_elems<T> * 4;
    const std::size_t wanted = (a.n + per_block - 1) / per_block;
    // Enough resident blocks to fill every SM; the grid-stride loop covers the rest.
    const auto blocks = static_cast<unsigned>(std::min<std::size_t>(wanted, static_cast<std::size_t>(sm_count()) * 8));
    detail::tensor_kernel<T, Quantize><<<blocks, detail::tensor_threads, 0, stream_>>>(a);
    detail::check_launch(name);
  }

  template <class T>
  static detail::block_kernel_args base_block_args(matrix_view<const T> x, fp8_dtype dtype) {
    detail::block_kernel_args a{};
    a.x = x.data;
    a.rows = x.rows;
    a.cols = x.cols;
    a.dtype = dtype;
    a.fp8_max = fp8_max(dtype);
    a.value_for_inf = detail::float_max;
    a.row_scale_rdiv = 1;
    a.col_scale_cdiv = 1;
    return a;
  }

  // The fast path needs 16-byte input rows and E-byte output rows.
  template <class T>
  static bool vec_aligned(const detail::block_kernel_args& a) {
    constexpr std::size_t E = detail::vec_elems<T>;
    const auto ok = [](const void* p, std::size_t align) { return (reinterpret_cast<std::uintptr_t>(p) % align) == 0; };
    return a.cols % E == 0 && ok(a.x, 16) && (a.row_data == nullptr || ok(a.row_data, E)) &&
           (a.col_data == nullptr || ok(a.col_data, E));
  }

  template <class T, int B, int H, bool Transposed>
  void launch_block(const detail::block_kernel_args& a, const char* name) const {
    constexpr std::size_t W = 32 * detail::vec_elems<T>;
    const std::size_t tiles = ((a.rows + H - 1) / H) * ((a.cols + W - 1) / W);
    detail::require(tiles < (1ull << 31), "cuda_backend: matrix [", a.rows, ", ", a.cols, "] has too many tiles");
    detail::block_kernel<T, B, H, Transposed><<<static_cast<unsigned>(tiles), detail::block_threads, 0, stream_>>>(a);
    detail::check_launch(name);
  }

  cudaStream_t stream_ = nullptr;
  mutable int sm_count_ = 0;  // queried on first use, so constructing a backend needs no device
};

static_assert(execution_backend<cuda_backend>);

}  // namespace tequant
