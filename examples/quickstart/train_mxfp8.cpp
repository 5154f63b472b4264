// SPDX-License-Identifier: Apache-2.0
// The main example's training runs for one recipe (one translation unit per recipe).
#include <tequant/recipe/mxfp8.hpp>

#include "trainer.hpp"

namespace quickstart {
run_result train_mxfp8(const options& o, bool fp8) { return train_with<tequant::mxfp8_scaling>(o, fp8); }
}  // namespace quickstart
