// SPDX-License-Identifier: Apache-2.0
// Every cast host_backend makes (per-tensor, current, MXFP8, block, NVFP4; 1D and 2D; both directions;
// fp32, bf16 and fp16 input; E4M3 and E5M2), printed as one digest per case. Built twice: header-only,
// and with TEQUANT_SEPARATE_HOST_KERNELS (the kernels from instantiate.cpp). The test compares the two.
#include <cstdint>
#include <cstdio>
#include <type_traits>
#include <vector>

#include "tequant/backend/host.hpp"
#include "tequant/quantized_tensor.hpp"

namespace {

std::uint64_t fnv1a(std::uint64_t h, const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

template <class T>
std::vector<T> input(std::size_t n) {
  std::vector<T> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(static_cast<int>((i * 7919) % 211) - 105) * 0.173f * (i % 13 == 0 ? 40.0f : 1.0f);
    if constexpr (std::is_same_v<T, tequant::bf16>) x[i] = tequant::to_bf16(v);
    else if constexpr (std::is_same_v<T, tequant::fp16>) x[i] = tequant::to_fp16(v);
    else x[i] = v;
  }
  return x;
}

template <class T>
int cast_case(const char* type, tequant::scaling_mode mode, tequant::fp8_dtype d, bool tile_2d, bool stochastic) {
  constexpr std::size_t rows = 256, cols = 256;
  const tequant::host_backend be;
  const std::vector<T> x = input<T>(rows * cols);
  float scale = 3.0f, amax = 0.0f;
  std::uint64_t offset = 5;
  tequant::cast_plan plan;
  plan.mode = mode;
  plan.dtype = d;
  plan.tile_2d = tile_2d;
  plan.scale = &scale;
  plan.amax = mode == tequant::scaling_mode::tensor_scale ? &amax : nullptr;
  if (stochastic) {
    plan.rng_offset = &offset;
    plan.rng_seed = 1234;
  }
  tequant::quantized_tensor<tequant::host_backend> q;
  q.prepare(be, plan, rows, cols);
  be.quantize(tequant::matrix_view<const T>{x.data(), rows, cols}, plan, q.output());
  std::uint64_t h = 14695981039346656037ull;
  const tequant::quantized_output o = q.output();
  for (auto s : {o.rowwise_data, o.columnwise_data, o.rowwise_block_scale, o.columnwise_block_scale}) h = fnv1a(h, s.data(), s.size());
  for (auto s : {o.rowwise_scale_inv, o.columnwise_scale_inv}) h = fnv1a(h, s.data(), s.size() * sizeof(float));
  h = fnv1a(h, &amax, sizeof amax);
  h = fnv1a(h, &offset, sizeof offset);
  std::printf("%-5s %-14s %s 2d=%d sr=%d %016llx\n", type, tequant::to_string(mode), d == tequant::fp8_dtype::e4m3 ? "e4m3" : "e5m2",
              tile_2d, stochastic, static_cast<unsigned long long>(h));
  return 1;
}

template <class T>
int every_case(const char* type) {
  using tequant::scaling_mode;
  int n = 0;
  for (auto d : {tequant::fp8_dtype::e4m3, tequant::fp8_dtype::e5m2}) {
    n += cast_case<T>(type, scaling_mode::tensor_scale, d, false, false);
    n += cast_case<T>(type, scaling_mode::tensor_current, d, false, false);
    for (bool tile_2d : {false, true}) {
      n += cast_case<T>(type, scaling_mode::mxfp8, d, tile_2d, false);
      n += cast_case<T>(type, scaling_mode::block, d, tile_2d, false);
    }
  }
  for (bool tile_2d : {false, true})
    for (bool sr : {false, true}) n += cast_case<T>(type, scaling_mode::nvfp4, tequant::fp8_dtype::e4m3, tile_2d, sr);
  return n;
}

}  // namespace

int main() {
  const int n = every_case<float>("fp32") + every_case<tequant::bf16>("bf16") + every_case<tequant::fp16>("fp16");
  std::printf("%d casts\n", n);
}
