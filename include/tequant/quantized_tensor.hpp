// SPDX-License-Identifier: Apache-2.0
// Owning storage for one quantized tensor in a backend's memory, sized from a cast plan.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>

#include "tequant/cast_plan.hpp"
#include "tequant/format/e8m0.hpp"
#include "tequant/format/nvfp4.hpp"

namespace tequant {

/// The codes and scales of one cast of a [rows, cols] tensor, in `Backend` memory. prepare() sizes it
/// for a plan and keeps the storage when the sizes do not change, so a module that casts the same
/// shapes every step allocates once.
template <class Backend>
class quantized_tensor {
 public:
  template <class T>
  using buffer_type = decltype(std::declval<const Backend&>().template make_buffer<T>(std::size_t{}));

  /// Room for both directions asked for. Per-tensor plans get one copy for both (shared_directions).
  void prepare(const Backend& be, const cast_plan& plan, std::size_t rows, std::size_t cols, bool rowwise = true,
               bool columnwise = true) {
    const quantized_layout l = layout_of(plan, rows, cols);
    if (l.shared_directions && columnwise) {
      rowwise = true;
      columnwise = false;
    }
    layout_ = l;
    rows_ = rows;
    cols_ = cols;
    for (int d = 0; d < 2; ++d) {
      const bool want = d == 0 ? rowwise : columnwise;
      resize(be, data_[d], want ? l.data : 0);
      resize(be, scale_inv_[d], want ? l.scale_inv[d] : 0);
      resize(be, block_scale_[d], want ? l.block_scale[d] : 0);
      used_[d] = want;
    }
  }

  /// The spans quantize() writes (a direction not prepared is empty).
  quantized_output output() noexcept {
    quantized_output o;
    o.rowwise_data = span(data_[0], used_[0] ? layout_.data : 0);
    o.columnwise_data = span(data_[1], used_[1] ? layout_.data : 0);
    o.rowwise_scale_inv = span(scale_inv_[0], used_[0] ? layout_.scale_inv[0] : 0);
    o.columnwise_scale_inv = span(scale_inv_[1], used_[1] ? layout_.scale_inv[1] : 0);
    o.rowwise_block_scale = span(block_scale_[0], used_[0] ? layout_.block_scale[0] : 0);
    o.columnwise_block_scale = span(block_scale_[1], used_[1] ? layout_.block_scale[1] : 0);
    return o;
  }

  std::size_t rows() const noexcept { return rows_; }
  std::size_t cols() const noexcept { return cols_; }
  const quantized_layout& layout() const noexcept { return layout_; }
  /// Whether the columnwise direction has its own codes (else the rowwise ones serve both).
  bool has_columnwise() const noexcept { return used_[1]; }

 private:
  template <class Buffer>
  static void resize(const Backend& be, Buffer& b, std::size_t n) {
    using T = std::remove_pointer_t<decltype(b.data())>;
    if (b.size() < n) b = be.template make_buffer<T>(n);
  }
  template <class Buffer>
  static auto span(Buffer& b, std::size_t n) noexcept {
    using T = std::remove_pointer_t<decltype(b.data())>;
    return n == 0 ? std::span<T>() : std::span<T>(b.data(), n);
  }

  quantized_layout layout_{};
  std::size_t rows_ = 0, cols_ = 0;
  bool used_[2]{};
  buffer_type<std::uint8_t> data_[2]{}, block_scale_[2]{};
  buffer_type<float> scale_inv_[2]{};
};

/// Calls f(scale) with the factor each rowwise block (or the whole tensor) of a cast made with `plan` was
/// multiplied by before its FP8 cast, padding skipped. Host memory only (logging, tests, plots).
template <class F>
void for_each_scale(const cast_plan& plan, std::size_t rows, std::size_t cols, const quantized_output& q, F&& f) {
  switch (plan.mode) {
    case scaling_mode::tensor_scale:
      if (plan.scale != nullptr) f(*plan.scale);
      return;
    case scaling_mode::tensor_current:
      if (!q.rowwise_scale_inv.empty()) f(1.0f / q.rowwise_scale_inv[0]);
      return;
    case scaling_mode::mxfp8: {
      const std::size_t stride = mxfp8_rowwise_scale_shape(rows, cols).cols;
      for (std::size_t r = 0; r < rows && !q.rowwise_block_scale.empty(); ++r)
        for (std::size_t b = 0; b < cols / 32; ++b) f(e8m0_multiplier(q.rowwise_block_scale[r * stride + b]));
      return;
    }
    case scaling_mode::block:
      for (const float si : q.rowwise_scale_inv)
        if (si != 0.0f) f(1.0f / si);  // 0 marks padding
      return;
    case scaling_mode::nvfp4: {
      if (q.rowwise_block_scale.empty() || q.rowwise_scale_inv.empty()) return;
      const std::size_t stride = nvfp4_rowwise_scale_shape(rows, cols).cols;
      const float global_inv = q.rowwise_scale_inv[0];
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t b = 0; b * 16 < cols; ++b) f(nvfp4_block_multiplier(q.rowwise_block_scale[r * stride + b], global_inv));
      return;
    }
  }
}

}  // namespace tequant
