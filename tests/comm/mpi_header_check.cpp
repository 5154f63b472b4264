// SPDX-License-Identifier: Apache-2.0
// comm/mpi.hpp compiles on its own (it is outside the generic header-set check because it needs mpi.h).
#include "tequant/comm/mpi.hpp"
