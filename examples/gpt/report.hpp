// SPDX-License-Identifier: Apache-2.0
// What every GPT trainer's report shares (own engine, several ranks, libtorch): loss.csv and how a
// scale is printed.
#pragma once
#include <cstddef>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

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

}  // namespace gpt
