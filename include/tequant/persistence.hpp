// SPDX-License-Identifier: Apache-2.0
// Save/load of a manager's complete state and TE-layout import/export (see docs/reliability.md).
#pragma once

#include "tequant/persistence/state.hpp"
#include "tequant/persistence/te_state.hpp"
