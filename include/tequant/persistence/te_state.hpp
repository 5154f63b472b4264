// SPDX-License-Identifier: Apache-2.0
// Delayed-scaling state in TransformerEngine's layout lives with the recipe that owns it.
#pragma once
#include "tequant/recipe/delayed_te_state.hpp"
