// SPDX-License-Identifier: Apache-2.0
// What every GPT trainer's report shares (own engine, several ranks, libtorch): loss.csv and how a
// scale is printed; for the trainers on several ranks (gpt_mpi, libtorch_gpt --ranks) ranks.csv and
// the comparison with one process.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

/// A scale as "v (2^e)": scales are powers of two or close to them.
inline std::string pow2(float v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3g (2^%.1f)", double(v), std::log2(double(v)));
  return b;
}

/// loss.csv: one row per step, the validation losses on the steps they were taken, with enough digits
/// to compare runs bit for bit. Result: train_loss, val_step, val_loss, forward_updates, backward_updates (fp32 may be null).
template <class Result>
void write_loss_csv(const std::string& path, const Result* fp32, const Result& fp8) {
  std::ofstream f(path);
  f << "step,train_loss_fp32,train_loss_fp8,val_loss_fp32,val_loss_fp8,forward_updates_fp8,backward_updates_fp8\n";
  char buf[64];
  auto num = [&](float x) {
    std::snprintf(buf, sizeof buf, "%.9g", double(x));
    return std::string(buf);
  };
  std::size_t v = 0;
  for (std::size_t k = 0; k < fp8.train_loss.size(); ++k) {
    const bool has_val = v < fp8.val_step.size() && fp8.val_step[v] == int(k + 1);
    f << k + 1 << ',' << (fp32 ? num(fp32->train_loss[k]) : "") << ',' << num(fp8.train_loss[k]) << ','
      << (has_val && fp32 ? num(fp32->val_loss[v]) : "") << ',' << (has_val ? num(fp8.val_loss[v]) : "") << ','
      << fp8.forward_updates[k] << ',' << fp8.backward_updates[k] << '\n';
    v += has_val;
  }
  if (!f) throw std::runtime_error("cannot write " + path);
}

/// What rank 0 gathers after every step of one run on several ranks.
struct rank_checks {
  std::vector<std::uint64_t> state, weights;  // rank 0's checksums per step
  std::vector<bool> state_same, weights_same;  // all ranks equal to rank 0, per step
  int identical(const std::vector<bool>& v) const { return int(std::count(v.begin(), v.end(), true)); }
};

/// ranks.csv: per step, the loss and whether every rank held rank 0's state and weights.
template <class Result>
void write_ranks_csv(const std::string& path, const Result& fp8, const rank_checks& c, bool stateful) {
  std::ofstream f(path);
  f << "step,train_loss_fp8,state_identical,weights_identical,state_checksum,weights_checksum\n";
  char buf[64];
  for (std::size_t k = 0; k < fp8.train_loss.size(); ++k) {
    std::snprintf(buf, sizeof buf, "%.9g", double(fp8.train_loss[k]));
    f << k + 1 << ',' << buf << ',' << (!stateful ? "n/a" : c.state_same[k] ? "yes" : "no") << ','
      << (c.weights_same[k] ? "yes" : "no") << ',';
    std::snprintf(buf, sizeof buf, "%016llx,%016llx", (unsigned long long)c.state[k], (unsigned long long)c.weights[k]);
    f << buf << '\n';
  }
  if (!f) throw std::runtime_error("cannot write " + path);
}

/// Rank 0's summary of an FP8 run on several ranks: losses, whether every rank held the same state and
/// weights at every step, updates per step, time. `wrong_all`: rank-steps without exactly one forward
/// and one backward update; `sum_seconds`: time in the gradient sum.
template <class Result>
void print_ranks_summary(const Result& fp8, const rank_checks& c8, const rank_checks* c32, int steps,
                         const char* recipe, int wrong_all, double sum_seconds) {
  std::printf("\n%-44s %.4f, %.4f\n", "train loss (last step), validation (final)", double(fp8.train_loss.back()),
              double(fp8.val_loss.back()));
  if (fp8.stateful)
    std::printf("%-44s %d of %d steps (checksums of every bucket's scales and amax history)\n",
                "FP8 state bit-identical on all ranks", c8.identical(c8.state_same), steps);
  else
    std::printf("%-44s none: %s is stateless (each cast scales from its own tensor)\n", "FP8 state", recipe);
  std::printf("%-44s %d of %d steps\n", "weights bit-identical on all ranks", c8.identical(c8.weights_same), steps);
  if (c32) std::printf("%-44s %d of %d steps\n", "FP32 run: weights bit-identical", c32->identical(c32->weights_same), steps);
  if (fp8.stateful)
    std::printf("%-44s %s\n", "updates per step (forward/backward)",
                wrong_all == 0 ? "1/1 on every rank at every step"
                               : (std::to_string(wrong_all) + " rank-steps without exactly 1/1").c_str());
  std::printf("%-44s %.1fs, %.0f tokens/s (global batch, all ranks); %.2fs of it in the gradient sum "
              "(waiting for the slowest rank included)\n",
              "training time (FP8)", fp8.seconds, fp8.tokens_per_second, sum_seconds);
  if (!fp8.sample.empty()) std::printf("\nsampled from the FP8 model (rank 0):\n----\n%s\n----\n", fp8.sample.c_str());
  std::fflush(stdout);
}

/// Largest |a - b| / |b| over the steps, and the step where it occurs.
inline std::pair<double, int> max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = -1.0;
  int at = 0;
  for (std::size_t k = 0; k < std::min(a.size(), b.size()); ++k) {
    const double d = std::fabs(double(a[k]) - double(b[k])) / std::fabs(double(b[k]));
    if (d > worst) {
      worst = d;
      at = int(k + 1);
    }
  }
  return {std::max(worst, 0.0), at};
}

}  // namespace gpt
