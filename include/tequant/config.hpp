// SPDX-License-Identifier: Apache-2.0
// tequant: the only header that inspects compiler and target macros.
#pragma once

#if defined(__CUDACC__)
#  define TEQUANT_HD __host__ __device__  // shared formulas run in kernels too
#else
#  define TEQUANT_HD
#endif

#if defined(_MSC_VER) && !defined(__clang__)
#  define TEQUANT_NO_UNIQUE_ADDRESS  // MSVC silently corrupts such members across kernel boundaries
#else
#  define TEQUANT_NO_UNIQUE_ADDRESS [[no_unique_address]]
#endif

// Host SIMD: x86 kernels compiled per function with a target attribute and chosen at run time, so a
// build without -mavx2 still gets them. Define TEQUANT_DISABLE_HOST_SIMD to keep only the portable loops.
#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__)) && \
    !defined(__CUDA_ARCH__) && !defined(TEQUANT_DISABLE_HOST_SIMD)
#  define TEQUANT_HAS_X86_TARGET_ATTRIBUTES 1
#  define TEQUANT_TARGET_AVX2 __attribute__((target("avx2,f16c")))
// The kernels' per-vector helpers: GCC's inliner gives up on them in translation units with many
// instantiations (a call per 8 elements cost the bf16 cast a third of its speed).
#  define TEQUANT_TARGET_AVX2_INLINE __attribute__((target("avx2,f16c"), always_inline))
// AVX-512 (F, BW, VL, DQ, VBMI) for the bf16 casts: fewer instructions per element (mask registers, byte
// permutes, vrangeps), chosen at run time like the AVX2 kernels.
#  define TEQUANT_TARGET_AVX512 __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi")))
#  define TEQUANT_TARGET_AVX512_INLINE \
    __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vbmi"), always_inline))
#else
#  define TEQUANT_HAS_X86_TARGET_ATTRIBUTES 0
#  define TEQUANT_TARGET_AVX2
#  define TEQUANT_TARGET_AVX2_INLINE
#  define TEQUANT_TARGET_AVX512
#  define TEQUANT_TARGET_AVX512_INLINE
#endif
// The whole translation unit already targets AVX2 + F16C (-mavx2 -mf16c, -march=haswell or later):
// no run-time check needed.
#if TEQUANT_HAS_X86_TARGET_ATTRIBUTES && defined(__AVX2__) && defined(__F16C__)
#  define TEQUANT_HOST_AVX2_BASELINE 1
#else
#  define TEQUANT_HOST_AVX2_BASELINE 0
#endif
#if TEQUANT_HOST_AVX2_BASELINE && defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512DQ__) && defined(__AVX512VBMI__)
#  define TEQUANT_HOST_AVX512_BASELINE 1
#else
#  define TEQUANT_HOST_AVX512_BASELINE 0
#endif

// The cast path (plan_cast) inlines into the module's code whatever the compiler's size heuristics say:
// its fast path is a few instructions, and a call would copy the 64-byte cast_plan out.
#if defined(__GNUC__) || defined(__clang__)
#  define TEQUANT_ALWAYS_INLINE [[gnu::always_inline]] inline
#else
#  define TEQUANT_ALWAYS_INLINE inline
#endif

#define TEQUANT_VERSION_MAJOR 0
#define TEQUANT_VERSION_MINOR 2
#define TEQUANT_VERSION_PATCH 0
