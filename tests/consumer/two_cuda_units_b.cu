// SPDX-License-Identifier: Apache-2.0
// Unit B of two_cuda_units.cu (the same file compiled again, with main).
#define TEQUANT_CONSUMER_UNIT_B
#include "two_cuda_units.cu"
