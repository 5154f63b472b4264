// SPDX-License-Identifier: Apache-2.0
// The main example's training runs for one recipe (one translation unit per recipe).
#include <tequant/recipe/delayed.hpp>

#include "trainer.hpp"

namespace quickstart {
template <>
tequant::delayed_params recipe_params<tequant::delayed_scaling<>>() {
  tequant::delayed_params p;
  p.history_length = 16;  // short window so the plot shows scales following the amaxes (TE: 1024)
  return p;
}

run_result train_delayed(const options& o, bool fp8) { return train_with<tequant::delayed_scaling<>>(o, fp8); }
}  // namespace quickstart
