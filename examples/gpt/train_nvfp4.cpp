// SPDX-License-Identifier: Apache-2.0
// The GPT example's training runs for one recipe (one translation unit per recipe).
#include <tequant/recipe/nvfp4.hpp>

#include "trainer.hpp"

namespace gpt {
run_result train_nvfp4(const options& o, const corpus& data, bool fp8) { return train_with<tequant::nvfp4_scaling>(o, data, fp8); }
}  // namespace gpt
