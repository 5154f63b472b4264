// SPDX-License-Identifier: Apache-2.0
// Policies of your own: the MLP example's trainer, unchanged, runs with a recipe and a boundary policy
// written outside the library (ema_current_scaling.hpp, every_k_backwards.hpp). It trains FP32 and
// FP8 and checks that FP8 converges like FP32 with one forward update per step and one backward update
// every k steps. Exit status 1 if not.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "../quickstart/trainer.hpp"
#include "ema_current_scaling.hpp"
#include "every_k_backwards.hpp"

// example-begin custom_make_boundary
namespace quickstart {
// How the trainer builds this boundary (its default builds Boundary{}).
template <>
custom::every_k_backwards make_boundary<custom::every_k_backwards>(engine&) {
  return custom::every_k_backwards(2);
}
}  // namespace quickstart
// example-end custom_make_boundary

namespace {

double final_loss(const quickstart::run_result& r) {
  const std::size_t n = std::max<std::size_t>(1, r.loss.size() / 10);
  double s = 0.0;
  for (std::size_t i = r.loss.size() - n; i < r.loss.size(); ++i) s += r.loss[i];
  return s / double(n);
}

}  // namespace

int main(int argc, char** argv) {
  quickstart::options o;
  o.steps = argc > 1 ? std::atoi(argv[1]) : 200;
  o.quiet = true;
  if (o.steps < 2) {
    std::fprintf(stderr, "usage: custom_policies [steps >= 2]\n");
    return 2;
  }
  // example-begin custom_train
  using run = quickstart::run_result (*)(const quickstart::options&, bool);
  const run train = &quickstart::train<custom::ema_current_scaling, custom::every_k_backwards, tequant::stacked_recompute>;
  // example-end custom_train
  std::printf("custom policies: recipe %s, boundary every_k_backwards(2), stacked_recompute, %d steps\n",
              std::string(custom::ema_current_scaling::name).c_str(), o.steps);
  const quickstart::run_result fp32 = train(o, false), fp8 = train(o, true);

  std::uint64_t forward = 0, backward = 0;
  for (int k = 0; k < o.steps; ++k) {
    forward += fp8.forward_updates[static_cast<std::size_t>(k)];
    backward += fp8.backward_updates[static_cast<std::size_t>(k)];
  }
  const double l32 = final_loss(fp32), l8 = final_loss(fp8), gap = (l8 - l32) / l32;
  // The trainer flushes what is pending after its last step, so an odd step count ends with one more.
  const std::uint64_t expect_backward = static_cast<std::uint64_t>(o.steps + 1) / 2;
  std::printf("final loss FP32 %.6f  FP8 %.6f  gap %+.2f%%\n", l32, l8, 100.0 * gap);
  std::printf("forward updates %llu (expected %d), backward updates %llu (expected %llu)\n",
              static_cast<unsigned long long>(forward), o.steps, static_cast<unsigned long long>(backward),
              static_cast<unsigned long long>(expect_backward));
  const bool ok = std::isfinite(l8) && std::fabs(gap) < 0.05 && forward == static_cast<std::uint64_t>(o.steps) &&
                  backward == expect_backward;
  std::printf("%s\n", ok ? "OK" : "FAILED");
  return ok ? 0 : 1;
}
