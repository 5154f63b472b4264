// SPDX-License-Identifier: Apache-2.0
// Fresh-process half of the resume test: resume_helper <state> <weights> <first_step> <steps> <out>
// loads the state and weights into a new manager, continues, and writes what continue_run returns.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "resume_common.hpp"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s <state> <weights> <first_step> <steps> <out>\n", argv[0]);
    return 2;
  }
  try {
    rel::resume_manager m(rel::resume_params());
    rel::toy_model<rel::resume_manager> model(m);  // registers the same modules, then loads into them
    rel::configure(model);
    tequant::load_state(m, std::filesystem::path(argv[1]));
    model.set_weight_bytes(rel::read_all(argv[2]));
    rel::write_all(argv[5], rel::continue_run(m, model, std::atoi(argv[3]), std::atoi(argv[4])));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
