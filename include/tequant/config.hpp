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

#define TEQUANT_VERSION_MAJOR 0
#define TEQUANT_VERSION_MINOR 1
#define TEQUANT_VERSION_PATCH 0
