// SPDX-License-Identifier: Apache-2.0
// comm/nccl.hpp compiles on its own with a plain C++ compiler (outside the generic header-set check).
#include "tequant/comm/nccl.hpp"
