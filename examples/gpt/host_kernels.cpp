// SPDX-License-Identifier: Apache-2.0
// The GPT's trainers are compiled with TEQUANT_SEPARATE_HOST_KERNELS: they see the host kernels'
// declarations only, and this one translation unit compiles the kernels for all of them.
#include <tequant/backend/host_kernels_instantiate.hpp>
