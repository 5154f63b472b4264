// SPDX-License-Identifier: Apache-2.0
// The main example's training runs for one recipe (one translation unit per recipe).
#include <tequant/recipe/nvfp4.hpp>

#include "trainer.hpp"

namespace quickstart {
run_result train_nvfp4(const options& o, bool fp8) { return train_with<tequant::nvfp4_scaling>(o, fp8); }
}  // namespace quickstart
