// SPDX-License-Identifier: Apache-2.0
// gpt_mpi's data-parallel training runs for one recipe (one translation unit per recipe).
#include <tequant/recipe/nvfp4.hpp>

#include "data_parallel_mpi.hpp"

namespace gpt {
run_result train_nvfp4_mpi(const options& o, const corpus& data, bool fp8, const mpi_parallel& dp) {
  return train_with<tequant::nvfp4_scaling, tequant::mpi_comm>(o, data, fp8, dp);
}
}  // namespace gpt
