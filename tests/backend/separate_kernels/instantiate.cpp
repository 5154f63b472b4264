// SPDX-License-Identifier: Apache-2.0
// The one translation unit that compiles the host kernels for the separate-kernels build of casts.cpp.
#include "tequant/backend/host_kernels_instantiate.hpp"
