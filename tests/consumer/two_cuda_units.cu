// SPDX-License-Identifier: Apache-2.0
// Two CUDA translation units of one program include the CUDA backend and launch its kernels: the
// program must link (each kernel is defined once). Compiled twice, as unit A and unit B.
#include <cstdio>
#include <tequant/backend/cuda/backend.cuh>

namespace {
// Every kernel that is not a class or function template of its own (and one that is).
void use_kernels(const tequant::cuda_backend& b, float* p) {
  b.max_accumulate(p, 1.0f);
  b.fill(p, 1, 0.0f);
  b.compute_scale(p, tequant::fp8_dtype::e4m3, false, 0.0f, p, p);
  b.dequantize_block({}, 0, 0, tequant::fp8_dtype::e4m3, false, false, {}, {});
  b.dequantize_nvfp4({}, 0, 0, true, {}, {}, {}, true);
}
}  // namespace

#ifdef TEQUANT_CONSUMER_UNIT_B
void launch_from_a(const tequant::cuda_backend& b, float* p);

int main(int argc, char**) {
  // Launching needs a GPU; linking is what this checks, so the kernels run only when asked.
  if (argc > 1) {
    tequant::cuda_backend b;
    launch_from_a(b, nullptr);
    use_kernels(b, nullptr);
  }
  std::puts("two CUDA translation units linked");
  return 0;
}
#else
void launch_from_a(const tequant::cuda_backend& b, float* p) { use_kernels(b, p); }
#endif
