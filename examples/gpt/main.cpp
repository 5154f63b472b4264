// SPDX-License-Identifier: Apache-2.0
// A character-level GPT trained twice on a frozen text corpus: in FP32, and with every GEMM operand
// of its QKV, attention output and MLP projections in FP8, with the scaling state managed by tequant,
// under per-block activation recompute. Prints the validation losses side by side, the updates per
// step, the scale range per role and text sampled from the FP8 model. Start reading at trainer.hpp.
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#include <unistd.h>

#include "../engine/gemm.hpp"
#include "report.hpp"
#include "options.hpp"
#include "plot.hpp"
#include "trainer.hpp"

namespace {

using namespace gpt;

run_result train(const options& o, const corpus& data, bool fp8) {
  switch (o.rec) {
    case recipe::delayed: return train_delayed(o, data, fp8);
    case recipe::current: return train_current(o, data, fp8);
    case recipe::mxfp8: return train_mxfp8(o, data, fp8);
    case recipe::block: return train_block(o, data, fp8);
    case recipe::nvfp4: return train_nvfp4(o, data, fp8);
  }
  return {};
}

void write_scales_csv(const std::string& path, const run_result& fp8) {
  static const char* roles[] = {"input", "weight", "grad_output"};
  std::ofstream f(path);
  f << "step,slot,role,scale_min,scale_max\n";
  for (std::size_t k = 0; k < fp8.train_loss.size(); ++k)
    for (const auto& s : fp8.scales)
      f << k + 1 << ',' << s.name << ',' << roles[s.role] << ',' << s.lo[k] << ',' << s.hi[k] << '\n';
  if (!f) throw std::runtime_error("cannot write " + path);
}

int run(const options& o) {
  const corpus data(o.data);
  std::printf("tequant GPT: recipe=%s boundary=%s recompute=%s steps=%d micro-batches=%d\n", name(o.rec), name(o.bnd),
              name(o.rc), o.steps, o.micro_batches);
  std::printf("model: %d layers, d_model %d, %d heads, context %d, vocab %zu; batch %d x %d micro-batch%s = %d tokens/step\n",
              o.layers, o.d_model, o.heads, o.context, data.vocab(), o.batch, o.micro_batches,
              o.micro_batches == 1 ? "" : "es", o.batch * o.micro_batches * o.context);
  std::printf("data: %zu bytes (train %zu, validation %zu); GEMMs: %s\n", data.bytes(), data.train_size(),
              data.validation_size(), mini::gemm_backend_name());
  run_result fp32;
  if (!o.fp8_only) fp32 = train(o, data, false);
  const run_result fp8 = train(o, data, true);

  std::map<std::pair<std::uint64_t, std::uint64_t>, int> per_step;
  int wrong = 0;
  std::uint64_t max_backward = 0;
  for (int k = 0; k < o.steps; ++k) {
    ++per_step[{fp8.forward_updates[k], fp8.backward_updates[k]}];
    wrong += fp8.forward_updates[k] != 1 || fp8.backward_updates[k] != 1;
    max_backward = std::max(max_backward, fp8.backward_updates[k]);
  }
  const double l8 = fp8.val_loss.back(), l32 = o.fp8_only ? NAN : fp32.val_loss.back(), gap = (l8 - l32) / l32;
  // --identity-casts: the second run is FP8's bookkeeping with FP32 values (the "FP8" column below).
  const char* second = o.identity_casts ? "identity casts" : format_name(o.rec);
  const std::string gap_label = std::string("relative gap (") + second + " - FP32) / FP32";
  std::printf("\n%-36s %14s %14s\n", "", "FP32", second);
  std::printf("%-36s %14.4f %14.4f\n", "validation loss (final)", l32, l8);
  std::printf("%-36s %14.4f %14.4f\n", "train loss (last step)", o.fp8_only ? NAN : double(fp32.train_loss.back()),
              double(fp8.train_loss.back()));
  std::printf("%-36s %14s %+13.2f%%\n", o.identity_casts ? "relative gap to FP32" : gap_label.c_str(), "",
              100.0 * gap);
  std::printf("%-36s %14s ", "updates per step (forward/backward)", "");
  if (!fp8.stateful) {
    std::printf("none: %s is stateless\n", name(o.rec));
  } else {
    bool first = true;
    for (const auto& [fb, count] : per_step) {
      std::printf("%s%llu/%llu on %d step%s", first ? "" : ", ", (unsigned long long)fb.first,
                  (unsigned long long)fb.second, count, count == 1 ? "" : "s");
      first = false;
    }
    std::printf("\n");
  }
  static const char* roles[] = {"input", "weight", "grad_output"};
  for (int role = 0; role < 3; ++role) {
    float lo = 0, hi = 0;
    bool seen = false;
    for (const auto& t : fp8.scales)
      if (t.role == role)
        for (std::size_t k = 0; k < t.lo.size(); ++k) {
          if (!(t.hi[k] > 0.0f)) continue;
          lo = seen ? std::min(lo, t.lo[k]) : t.lo[k];
          hi = seen ? std::max(hi, t.hi[k]) : t.hi[k];
          seen = true;
        }
    std::printf("%-36s %14s %-11s %s .. %s\n", role == 0 ? "scale range seen (per role)" : "", "", roles[role],
                pow2(lo).c_str(), pow2(hi).c_str());
  }
  if (o.cast_cache && !o.identity_casts)
    std::printf("%-36s %14s %llu made, %llu reused (cast_cache)\n", "FP8 weight casts", "",
                (unsigned long long)fp8.weight_casts, (unsigned long long)fp8.weight_casts_reused);
  std::printf("%-36s %13.1fs %13.1fs\n", "training time", fp32.seconds, fp8.seconds);
  std::printf("%-36s %14.0f %14.0f\n", "tokens/s", fp32.tokens_per_second, fp8.tokens_per_second);
  // Identity casts compute exactly what FP32 computes, plus tequant's bookkeeping: equal losses, and
  // the time difference is the bookkeeping's (and the amax pass's) share of a step.
  const bool same_as_fp32 = !o.fp8_only && fp8.train_loss == fp32.train_loss && fp8.val_loss == fp32.val_loss;
  const double share = (fp8.seconds - fp32.seconds) / fp8.seconds;
  if (o.identity_casts && !o.fp8_only) {
    std::printf("%-36s %14s %s\n", "identity-cast losses vs FP32", "",
                same_as_fp32 ? "identical, every step (bit for bit)" : "DIFFERENT (they should be identical)");
    std::printf("%-36s %14s %+.2f%% of a step (timing noise included)\n", "tequant bookkeeping", "", 100.0 * share);
  }
  if (fp8.stateful && wrong != 0)
    std::printf("\n%d of %d steps did not get exactly one forward and one backward update.%s\n", wrong, o.steps,
                o.bnd == boundary::first_module
                    ? " This is TE's old \"first module owns the backward update\" rule: with recompute, the replayed\n"
                      "modules own it too and flush inside the nested backward. Use --boundary engine, scope or autocast."
                    : "");
  if (!fp8.sample.empty())
    std::printf("\nsampled from the %s model:\n----\n%s\n----\n", o.identity_casts ? "identity-casts" : second,
                fp8.sample.c_str());

  std::filesystem::create_directories(o.out);
  const std::string dir = std::filesystem::absolute(o.out).lexically_normal().string();
  write_loss_csv(dir + "/loss.csv", o.fp8_only ? nullptr : &fp32, fp8);
  write_scales_csv(dir + "/scales.csv", fp8);
  char title[256];
  std::snprintf(title, sizeof title, "tequant GPT: %d layers, d_model %d, context %d, %d steps; recipe %s, recompute %s",
                o.layers, o.d_model, o.context, o.steps, name(o.rec), name(o.rc));
  const std::string fp8_label =
      o.identity_casts ? std::string("identity casts") : std::string("FP8 (") + name(o.rec) + ")";
  const std::string plotted = write_plot({dir, title, fp8_label, !o.fp8_only, fp8.scales.size()});
  std::printf("\nwrote %s/: loss.csv, scales.csv, %s\n", dir.c_str(), plotted.c_str());
  std::printf("summary: recipe=%s boundary=%s recompute=%s val_fp32=%.4f val_fp8=%.4f gap_percent=%+.2f "
              "within_3_percent=%s updates_1_1=%s max_backward_updates_per_step=%llu\n",
              name(o.rec), name(o.bnd), name(o.rc), l32, l8, 100.0 * gap,
              o.fp8_only ? "n/a" : std::fabs(gap) <= 0.03 ? "yes" : "no",
              !fp8.stateful ? "n/a" : wrong == 0 ? "yes" : "no", (unsigned long long)max_backward);
  if (o.identity_casts && !o.fp8_only)
    std::printf("summary: identity_casts_equal_fp32=%s seconds_fp32=%.2f seconds_identity_casts=%.2f "
                "bookkeeping_share_percent=%+.2f\n",
                same_as_fp32 ? "yes" : "no", fp32.seconds, fp8.seconds, 100.0 * share);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  gpt::options o;
  o.tty = isatty(STDOUT_FILENO) != 0;
  try {
    if (!gpt::parse(argc, argv, o)) {
      std::fputs(gpt::usage, stdout);
      return 0;
    }
  } catch (const gpt::bad_option& e) {
    std::fprintf(stderr, "gpt: %s\n\n%s", e.what(), gpt::usage);
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\ngpt: error: %s\n", e.what());
    return 1;
  }
}
