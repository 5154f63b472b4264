// SPDX-License-Identifier: Apache-2.0
// integration/libtorch.hpp compiles on its own (it is excluded from the generic header-set check).
#include "tequant/integration/libtorch.hpp"
