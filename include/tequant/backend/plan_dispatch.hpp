// SPDX-License-Identifier: Apache-2.0
// quantize(input, plan, output) and dequantize(plan, ..., output) for any backend whose kernel entry
// points have the host backend's signatures (host_backend, cuda_backend): the plan's scaling mode picks
// the kernel, so call sites never unpack a plan and never name a recipe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>

#include "tequant/backend/layouts.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/error.hpp"

namespace tequant::detail {

/// The directions `o` requests after checking the spans a per-tensor cast writes.
struct tensor_request {
  bool row = false, col = false;
};

inline tensor_request check_tensor_output(const char* what, std::size_t n, const quantized_output& o) {
  tensor_request r{!o.rowwise_data.empty(), !o.columnwise_data.empty()};
  if (n == 0) return r;
  require(r.row || r.col, what, ": neither rowwise_data nor columnwise_data requested");
  if (r.row) {
    require_size(what, "rowwise_data", o.rowwise_data.size(), n, "rows*cols");
    require_size(what, "rowwise_scale_inv", o.rowwise_scale_inv.size(), 1, "one value per tensor");
  }
  if (r.col) {
    require_size(what, "columnwise_data", o.columnwise_data.size(), n, "rows*cols");
    require_size(what, "columnwise_scale_inv", o.columnwise_scale_inv.size(), 1, "one value per tensor");
  }
  return r;
}

/// Whether a backend implements NVFP4's random Hadamard transform (declares has_nvfp4_rht = true).
template <class Backend>
inline constexpr bool backend_has_nvfp4_rht = [] {
  if constexpr (requires { Backend::has_nvfp4_rht; }) return Backend::has_nvfp4_rht;
  else return false;
}();

/// A plan asking for the transform on a backend without it is refused rather than cast without it.
template <class Backend>
void require_nvfp4_rht(const char* what, const cast_plan& p) {
  if constexpr (!backend_has_nvfp4_rht<Backend>)
    require(!p.columnwise_rht, what, ": this backend has no NVFP4 random Hadamard transform (the plan has ",
            "columnwise_rht); use host_backend or nvfp4_params::random_hadamard_transform = false");
}

[[noreturn, gnu::cold]] inline void unknown_mode(const char* what, scaling_mode m) {
  fail(what, ": scaling mode ", static_cast<unsigned>(m), " (", to_string(m), ") has no kernel in this backend");
}

template <class Backend, class T>
void quantize_with_plan(const Backend& be, matrix_view<const T> x, const cast_plan& p, const quantized_output& o) {
  require(p.enabled, "quantize: the plan is for high precision (plan_cast ran outside an enabled autocast region); "
                     "run this GEMM on the unquantized tensor");
  require(p.mode == scaling_mode::tensor_scale || p.amax == nullptr, "quantize: a ", to_string(p.mode),
          " plan records no amax (plan.amax must be null)");
  const std::size_t n = x.rows * x.cols;
  switch (p.mode) {
    case scaling_mode::tensor_scale:
    case scaling_mode::tensor_current: {
      const tensor_request r = check_tensor_output("quantize", n, o);
      if (!r.row && !r.col) return;
      std::uint8_t* data = r.row ? o.rowwise_data.data() : o.columnwise_data.data();
      float* scale_inv = r.row ? o.rowwise_scale_inv.data() : o.columnwise_scale_inv.data();
      if (p.mode == scaling_mode::tensor_scale) {
        require(p.scale != nullptr, "quantize: a tensor_scale plan without a scale");
        be.quantize_tensor(x.data, n, p.scale, p.dtype, data, scale_inv, p.amax);
      } else {
        be.quantize_current(x.data, n, p.dtype, p.power_2_scale, p.amax_epsilon, data, scale_inv);
      }
      if (r.row && r.col) {  // one scale for the whole tensor: both directions hold the same codes
        be.copy(o.columnwise_data.data(), data, n);
        be.copy(o.columnwise_scale_inv.data(), scale_inv, 1);
      }
      return;
    }
    case scaling_mode::mxfp8:
      be.quantize_mxfp8(x, p.dtype, p.tile_2d,
                        mxfp8_output{o.rowwise_data, o.rowwise_block_scale, o.columnwise_data, o.columnwise_block_scale});
      return;
    case scaling_mode::block:
      be.quantize_block(x, p.dtype, p.tile_2d, p.power_2_scale, p.amax_epsilon,
                        block_output{o.rowwise_data, o.rowwise_scale_inv, o.columnwise_data, o.columnwise_scale_inv});
      return;
    case scaling_mode::nvfp4:
      require_nvfp4_rht<Backend>("quantize", p);
      be.quantize_nvfp4(x, nvfp4_options{p.tile_2d, p.rng_offset, p.rng_seed, p.columnwise_rht},
                        nvfp4_output{o.rowwise_data, o.rowwise_block_scale, o.rowwise_scale_inv, o.columnwise_data,
                                     o.columnwise_block_scale, o.columnwise_scale_inv});
      return;
  }
  unknown_mode("quantize", p.mode);
}

/// Decodes one direction of a cast made with `p` into out [rows, cols] (block scaling's transposed
/// columnwise data included). Per-tensor modes read the columnwise copy when there is one.
template <class Backend>
void dequantize_with_plan(const Backend& be, const cast_plan& p, std::size_t rows, std::size_t cols,
                          const quantized_output& q, bool columnwise, std::span<float> out) {
  const std::size_t n = rows * cols;
  switch (p.mode) {
    case scaling_mode::tensor_scale:
    case scaling_mode::tensor_current: {
      const bool col = columnwise && !q.columnwise_data.empty();
      const std::span<std::uint8_t> data = col ? q.columnwise_data : q.rowwise_data;
      const std::span<float> scale_inv = col ? q.columnwise_scale_inv : q.rowwise_scale_inv;
      require_size("dequantize", "data", data.size(), n, "rows*cols");
      require_size("dequantize", "scale_inv", scale_inv.size(), 1, "one value per tensor");
      require_size("dequantize", "out", out.size(), n, "rows*cols");
      be.dequantize_tensor(data.data(), n, p.dtype, scale_inv.data(), out.data());
      return;
    }
    case scaling_mode::mxfp8:
      be.dequantize_mxfp8(columnwise ? q.columnwise_data : q.rowwise_data, rows, cols, p.dtype, columnwise,
                          columnwise ? q.columnwise_block_scale : q.rowwise_block_scale, out);
      return;
    case scaling_mode::block:
      be.dequantize_block(columnwise ? q.columnwise_data : q.rowwise_data, rows, cols, p.dtype, p.tile_2d, columnwise,
                          columnwise ? q.columnwise_scale_inv : q.rowwise_scale_inv, out);
      return;
    case scaling_mode::nvfp4:
      require_nvfp4_rht<Backend>("dequantize", p);
      if constexpr (backend_has_nvfp4_rht<Backend>) {
        be.dequantize_nvfp4(columnwise ? q.columnwise_data : q.rowwise_data, rows, cols, columnwise,
                            columnwise ? q.columnwise_block_scale : q.rowwise_block_scale,
                            columnwise ? q.columnwise_scale_inv : q.rowwise_scale_inv, out, p.columnwise_rht);
      } else {
        be.dequantize_nvfp4(columnwise ? q.columnwise_data : q.rowwise_data, rows, cols, columnwise,
                            columnwise ? q.columnwise_block_scale : q.rowwise_block_scale,
                            columnwise ? q.columnwise_scale_inv : q.rowwise_scale_inv, out);
      }
      return;
  }
  unknown_mode("dequantize", p.mode);
}

}  // namespace tequant::detail
