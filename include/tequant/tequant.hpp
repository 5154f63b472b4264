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
