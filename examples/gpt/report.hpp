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
