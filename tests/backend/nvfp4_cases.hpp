// SPDX-License-Identifier: Apache-2.0
// NVFP4 casts on any backend, and the CUDA kernels' block functions (detail/nvfp4_blocks.hpp) run on
// the host, compared byte for byte with host_backend over one list of cases: fp32/bf16/fp16, 1x16 and
// 16x16 blocks, round to nearest and stochastic, rowwise/columnwise/both, partial blocks, NaN, inf, +-0,
// outliers and denormals; and the random Hadamard transform of the columnwise copy (its cast and its
// inverse in dequantize, through detail/nvfp4_rht_blocks.hpp's per-group functions). Included by the host
// test (nvfp4_blocks_test.cpp) and the CUDA test (tests/cuda/nvfp4_cuda_test.cu), which runs the same
// cases on cuda_backend.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/backend_suite.hpp"
#include "tequant/backend/host.hpp"
#include "tequant/backend/layouts.hpp"
#include "tequant/backend/validate.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/detail/nvfp4_blocks.hpp"
#include "tequant/detail/nvfp4_rht_blocks.hpp"
#include "tequant/format/bits.hpp"
#include "tequant/quantized_tensor.hpp"

namespace nvfp4_cases {

/// One cast to compare: shape, input pattern, plan knobs and the directions requested.
struct cast_case {
  std::size_t rows, cols;
  unsigned seed;
  bool specials;  // NaN, inf, +-0, denormals, huge values mixed in
  int uniform;    // 0: values(); 1: all zero; 2: all NaN; 3: -0 everywhere but one -inf
  bool tile_2d, stochastic, rowwise, columnwise;
  std::uint64_t first_offset;
  bool rht;  // columnwise copy through the random Hadamard transform (rows a multiple of 16, 1D)

  std::string name() const {
    return std::to_string(rows) + "x" + std::to_string(cols) + " seed " + std::to_string(seed) +
           (specials ? " specials" : "") + (uniform != 0 ? " uniform " + std::to_string(uniform) : "") + (tile_2d ? " 2D" : " 1D") + (stochastic ? " SR" : " RN") +
           (rowwise ? " row" : "") + (columnwise ? " col" : "") + (rht ? " RHT" : "");
  }
};

/// Everything a cast wrote, in host memory; `offset` is *rng_offset after the cast.
struct cast_result {
  std::vector<std::uint8_t> row_data, row_scale, col_data, col_scale;
  std::vector<float> row_global, col_global;
  std::uint64_t offset = 0;
  friend bool operator==(const cast_result&, const cast_result&) = default;
};

/// Values with every edge NVFP4 has: ordinary magnitudes over a wide range (a different one per block,
/// so block scales differ), outliers and exact zeros of both signs; with `specials` also NaN of both
/// signs and denormals, and for a third of the seeds +-inf (the global scale then falls back to 1), for
/// another third values near FLT_MAX.
inline std::vector<float> values(std::size_t n, unsigned seed, bool specials) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned k = rng() % 100;
    const float sign = (rng() % 2) != 0 ? 1.0f : -1.0f;
    const float block_magnitude = std::ldexp(1.0f, static_cast<int>((i / 16) % 23) - 11);
    if (specials && k < 4) x[i] = std::copysign(nan, sign);
    else if (specials && k < 7) x[i] = sign * std::ldexp(static_cast<float>(1 + rng() % 0x7FFFFF), -149);
    else if (specials && k == 7 && seed % 3 == 0) x[i] = sign * inf;
    else if (specials && k == 7 && seed % 3 == 1) x[i] = sign * 3.0e38f;
    else if (k < 12) x[i] = sign * 0.0f;
    else if (k < 14) x[i] = nd(rng) * 1e4f;  // outliers
    else x[i] = nd(rng) * block_magnitude;
  }
  return x;
}

/// The input of a case, as floats.
inline std::vector<float> input_of(const cast_case& c) {
  const std::size_t n = c.rows * c.cols;
  switch (c.uniform) {
    case 1: return std::vector<float>(n, 0.0f);
    case 2: return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
    case 3: {
      std::vector<float> x(n, -0.0f);
      x[n / 2 + 1] = -std::numeric_limits<float>::infinity();
      return x;
    }
    default: return values(n, c.seed, c.specials);
  }
}

/// The list of cases: small and partial shapes in every combination, inputs of both kinds.
inline std::vector<cast_case> all_cases() {
  const std::size_t shapes[][2] = {{2, 2}, {16, 16}, {18, 40}, {34, 50}, {130, 34}, {48, 150}, {64, 256}, {6, 1030}};
  std::vector<cast_case> cases;
  unsigned seed = 1;
  for (const auto& s : shapes)
    for (const bool specials : {false, true})
      for (const bool tile_2d : {false, true})
        for (const bool sr : {false, true})
          for (const int dirs : {1, 2, 3})
            cases.push_back({s[0], s[1], seed++, specials, 0, tile_2d, sr, (dirs & 1) != 0, (dirs & 2) != 0,
                             sr ? std::uint64_t{977} * seed : 0, false});
  // Whole tensors at the global scale's edges: amax 0 and amax NaN-only (S_enc = 1), amax inf.
  for (const int uniform : {1, 2, 3})
    for (const bool tile_2d : {false, true})
      for (const bool sr : {false, true})
        cases.push_back({16, 34, seed++, false, uniform, tile_2d, sr, true, true, 5, false});
  // The random Hadamard transform of the columnwise copy: rows in whole 16-row groups, 1D blocks only;
  // partial rowwise blocks, one-group and many-group columns, the same edges (a NaN in a group makes its
  // whole transformed group NaN, so its block scale NaN; an infinity makes it +-inf or NaN); 144 rows:
  // nine groups per column (the host's vector cast takes eight blocks of a column at a time).
  const std::size_t rht_shapes[][2] = {{16, 16}, {16, 34}, {32, 2}, {48, 150}, {64, 256}, {16, 1030}, {144, 42}};
  for (const auto& s : rht_shapes)
    for (const bool specials : {false, true})
      for (const bool sr : {false, true})
        for (const int dirs : {1, 2, 3})
          cases.push_back({s[0], s[1], seed++, specials, 0, false, sr, (dirs & 1) != 0, (dirs & 2) != 0,
                           sr ? std::uint64_t{977} * seed : 0, true});
  for (const int uniform : {1, 2, 3})
    for (const bool sr : {false, true}) cases.push_back({16, 34, seed++, false, uniform, false, sr, true, true, 5, true});
  return cases;
}

template <class T>
std::vector<T> inputs_as(const std::vector<float>& x) {
  std::vector<T> v(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) v[i] = backend_suite::from_float<T>(x[i]);
  return v;
}

inline tequant::cast_plan plan_for(const cast_case& c, std::uint64_t* offset) {
  tequant::cast_plan p{nullptr, nullptr, tequant::fp8_dtype::e4m3, tequant::scaling_mode::nvfp4};
  p.tile_2d = c.tile_2d;
  p.columnwise_rht = c.rht;
  if (c.stochastic) {
    p.rng_offset = offset;
    p.rng_seed = 0x5EEDull + c.seed;
  }
  return p;
}

/// The cast through `be.quantize(x, plan, output)`; outputs prefilled with 0xAB, so unwritten bytes
/// (padding included) show up.
template <class Backend, class T>
cast_result cast_on(const Backend& be, const cast_case& c, const std::vector<T>& x) {
  std::uint64_t offset = c.first_offset;
  const tequant::cast_plan plan = plan_for(c, &offset);
  tequant::quantized_tensor<Backend> q;
  q.prepare(be, plan, c.rows, c.cols, c.rowwise, c.columnwise);
  const tequant::quantized_output o = q.output();
  for (const auto s : {o.rowwise_data, o.rowwise_block_scale, o.columnwise_data, o.columnwise_block_scale})
    if (!s.empty()) be.fill(s.data(), s.size(), std::uint8_t{0xAB});
  auto xb = backend_suite::upload(be, x);
  be.quantize(tequant::matrix_view<const T>{xb.data(), c.rows, c.cols}, plan, o);
  const auto get = [&](auto s) {
    std::vector<std::remove_cv_t<typename decltype(s)::element_type>> h(s.size());
    be.download(h.data(), s.data(), s.size());
    return h;
  };
  return {get(o.rowwise_data), get(o.rowwise_block_scale),  get(o.columnwise_data),
          get(o.columnwise_block_scale), get(o.rowwise_scale_inv), get(o.columnwise_scale_inv), offset};
}

/// The cast as the CUDA backend does it, run on the host: the same argument set-up, then the kernels'
/// per-thread block functions over every tile and block (the order of threads does not matter: each
/// writes its own bytes).
template <class T>
cast_result cast_by_blocks(const cast_case& c, const std::vector<T>& x) {
  namespace d = tequant::detail;
  std::uint64_t offset = c.first_offset;
  const tequant::cast_plan plan = plan_for(c, &offset);
  const tequant::quantized_layout l = tequant::layout_of(plan, c.rows, c.cols);
  cast_result r;
  r.row_data.assign(c.rowwise ? l.data : 0, 0xAB);
  r.row_scale.assign(c.rowwise ? l.block_scale[0] : 0, 0xAB);
  r.row_global.assign(c.rowwise ? 1 : 0, 0.0f);
  r.col_data.assign(c.columnwise ? l.data : 0, 0xAB);
  r.col_scale.assign(c.columnwise ? l.block_scale[1] : 0, 0xAB);
  r.col_global.assign(c.columnwise ? 1 : 0, 0.0f);
  const tequant::nvfp4_output o{r.row_data, r.row_scale, r.row_global, r.col_data, r.col_scale, r.col_global};
  const tequant::nvfp4_options opt{plan.tile_2d, plan.rng_offset, plan.rng_seed, plan.columnwise_rht};
  const auto req = d::check_quantize_nvfp4(c.rows, c.cols, x.data(), o);
  d::nvfp4_cast_args a = d::nvfp4_make_cast_args(x.data(), c.rows, c.cols, opt, o, req.rs, req.cs);
  const d::nvfp4_tensor_scales s = d::nvfp4_scales_from_amax(d::nvfp4_strided_amax(x.data(), x.size(), 1));
  const std::size_t MB = (c.rows + 15) / 16, KB = d::nvfp4_tile_cols(a);
  std::vector<std::uint8_t> tiles(MB * KB);
  if (c.tile_2d) {
    a.tile_scale = tiles.data();
    for (std::size_t t = 0; t < MB * KB; ++t) tiles[t] = d::nvfp4_tile_code<T>(a, s.encode, t / KB, t % KB);
  }
  if (c.rowwise) {
    std::fill(r.row_scale.begin(), r.row_scale.end(), 0);
    r.row_global[0] = s.decode;
    for (std::size_t t = 0; t < c.rows * KB; ++t) d::nvfp4_rowwise_block<T>(a, s, t / KB, t % KB);
  }
  if (c.columnwise && c.rht) {
    // The amax kernel's threads (the max of their keys), then the cast kernel's, over every group.
    std::fill(r.col_scale.begin(), r.col_scale.end(), 0);
    std::uint32_t key = 0;
    for (std::size_t t = 0; t < MB * c.cols; ++t) {
      const std::uint32_t k = d::float_bits(d::nvfp4_rht_group_amax<T>(a, t % c.cols, t / c.cols));
      key = k > key ? k : key;
    }
    const d::nvfp4_tensor_scales ts = d::nvfp4_scales_from_amax(d::bits_float(key));
    r.col_global[0] = ts.decode;
    for (std::size_t t = 0; t < MB * c.cols; ++t) d::nvfp4_rht_columnwise_block<T>(a, ts, t % c.cols, t / c.cols);
  } else if (c.columnwise) {
    std::fill(r.col_scale.begin(), r.col_scale.end(), 0);
    r.col_global[0] = s.decode;
    for (std::size_t t = 0; t < MB * c.cols; ++t) d::nvfp4_columnwise_block<T>(a, s, t % c.cols, t / c.cols);
  }
  d::nvfp4_advance_stream(a, opt);
  r.offset = offset;
  return r;
}

/// Compares two results field by field (a failure names the field and the first differing byte).
inline void check_same(const cast_result& want, const cast_result& got) {
  const auto first_diff = [](const auto& a, const auto& b) -> long {
    if (a.size() != b.size()) return -2;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], sizeof(a[i])) != 0) return static_cast<long>(i);
    return -1;
  };
  CHECK(first_diff(want.row_data, got.row_data) == -1);
  CHECK(first_diff(want.row_scale, got.row_scale) == -1);
  CHECK(first_diff(want.row_global, got.row_global) == -1);
  CHECK(first_diff(want.col_data, got.col_data) == -1);
  CHECK(first_diff(want.col_scale, got.col_scale) == -1);
  CHECK(first_diff(want.col_global, got.col_global) == -1);
  CHECK(want.offset == got.offset);
}

/// Dequantized values of one direction of a host cast, through host_backend (the reference); the
/// columnwise copy of an RHT case transformed back.
inline std::vector<float> host_dequantize(const cast_case& c, const cast_result& r, bool columnwise) {
  std::vector<float> out(c.rows * c.cols);
  tequant::host_backend{}.dequantize_nvfp4(columnwise ? r.col_data : r.row_data, c.rows, c.cols, columnwise,
                                           columnwise ? r.col_scale : r.row_scale,
                                           columnwise ? r.col_global : r.row_global, out, c.rht);
  return out;
}

/// The same through the kernels' per-element function (and per-group inverse for an RHT columnwise copy).
inline std::vector<float> dequantize_by_elements(const cast_case& c, const cast_result& r, bool columnwise) {
  const auto& data = columnwise ? r.col_data : r.row_data;
  const auto& scale = columnwise ? r.col_scale : r.row_scale;
  const tequant::scale_shape ss = columnwise ? tequant::nvfp4_columnwise_scale_shape(c.rows, c.cols)
                                             : tequant::nvfp4_rowwise_scale_shape(c.rows, c.cols);
  const float g = columnwise ? r.col_global[0] : r.row_global[0];
  std::vector<float> out(c.rows * c.cols);
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = tequant::detail::nvfp4_dequantize_element(data.data(), c.rows, c.cols, columnwise, scale.data(), ss.cols,
                                                       g, i / c.cols, i % c.cols);
  if (columnwise && c.rht)
    for (std::size_t t = 0; t < c.rows / 16 * c.cols; ++t)
      tequant::detail::nvfp4_rht_inverse_group(out.data(), c.cols, t % c.cols, t / c.cols);
  return out;
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

/// Bit for bit, except that any two NaNs are equal: a device sum or product involving a NaN gives the
/// canonical NaN, x86 the NaN operand (sign and payload), so an RHT inverse's NaN bits differ.
inline bool same_values(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (tequant::detail::float_bits(a[i]) != tequant::detail::float_bits(b[i]) &&
        !(tequant::detail::is_nan(a[i]) && tequant::detail::is_nan(b[i])))
      return false;
  return true;
}

/// Every case, for one input type: the block functions on the host equal host_backend byte for byte,
/// and so does their per-element dequantize. RHT cases must change the columnwise bytes (a transform
/// dropped on both sides would otherwise pass).
template <class T>
void check_blocks_match_host() {
  const tequant::host_backend hb;
  std::size_t rht_cases = 0, rht_changed = 0;
  for (const cast_case& c : all_cases()) {
    CAPTURE(c.name());
    const std::vector<T> x = inputs_as<T>(input_of(c));
    const cast_result want = cast_on(hb, c, x);
    check_same(want, cast_by_blocks(c, x));
    for (const bool col : {false, true})
      if (col ? c.columnwise : c.rowwise) CHECK(same_bits(host_dequantize(c, want, col), dequantize_by_elements(c, want, col)));
    if (c.rht && c.columnwise && c.uniform == 0) {
      cast_case plain = c;
      plain.rht = false;
      ++rht_cases;
      rht_changed += cast_on(hb, plain, x).col_data != want.col_data;
    }
  }
  CHECK(rht_cases > 0);
  CHECK(rht_changed == rht_cases);
}

}  // namespace nvfp4_cases
