// SPDX-License-Identifier: Apache-2.0
// Umbrella header, host only: it never includes a .cuh (CUDA code includes tequant/backend/cuda/*.cuh).
#pragma once

#include "tequant/config.hpp"
#include "tequant/error.hpp"
#include "tequant/policy.hpp"

#include "tequant/format/bits.hpp"
#include "tequant/format/e8m0.hpp"
#include "tequant/format/formats.hpp"
#include "tequant/format/fp8.hpp"
#include "tequant/format/half.hpp"
#include "tequant/format/scale.hpp"

#include "tequant/recipe.hpp"

#include "tequant/boundary/autocast_entry.hpp"
#include "tequant/boundary/engine_callback.hpp"
#include "tequant/boundary/explicit_scope.hpp"
#include "tequant/boundary/first_module_owner.hpp"

#include "tequant/checkpoint/no_recompute.hpp"
#include "tequant/checkpoint/stacked_recompute.hpp"

#include "tequant/backend/host.hpp"
#include "tequant/cast_plan.hpp"
#include "tequant/quantized_tensor.hpp"
#include "tequant/comm/single_process.hpp"

#include "tequant/manager.hpp"
#include "tequant/cast_cache.hpp"
#include "tequant/persistence.hpp"

// Not included here because they need a third-party library: tequant/comm/mpi.hpp (MPI),
// tequant/comm/nccl.hpp (NCCL + CUDA runtime), tequant/integration/libtorch.hpp (libtorch), and the
// nvcc-only tequant/backend/cuda/*.cuh.
