// SPDX-License-Identifier: Apache-2.0
// All scaling recipes.
#pragma once

#include "tequant/recipe/block.hpp"
#include "tequant/recipe/concepts.hpp"
#include "tequant/recipe/current.hpp"
#include "tequant/recipe/delayed.hpp"
#include "tequant/recipe/delayed_state.hpp"
#include "tequant/recipe/mxfp8.hpp"
#include "tequant/recipe/nvfp4.hpp"
