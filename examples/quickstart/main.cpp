// SPDX-License-Identifier: Apache-2.0
// tequant's main example: a custom C++ trainer (its own little autograd engine, no libtorch) trains
// the same residual MLP twice, in FP32 and with FP8 quantization whose state tequant manages, and
// shows that FP8 converges like FP32 with exactly one forward and one backward update per step,
// even with nested activation recompute. Start reading at trainer.hpp (the training loop).
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include <unistd.h>

#include "options.hpp"
#include "report.hpp"
#include "trainer.hpp"

namespace {

using namespace quickstart;

double final_loss(const run_result& r) {
  const std::size_t n = std::max<std::size_t>(1, r.loss.size() / 10);  // mean of the last 10% of steps
  double s = 0.0;
  for (std::size_t i = r.loss.size() - n; i < r.loss.size(); ++i) s += r.loss[i];
  return s / double(n);
}

run_result train(const options& o, bool fp8) {
  switch (o.rec) {
    case recipe::delayed: return train_delayed(o, fp8);
    case recipe::current: return train_current(o, fp8);
    case recipe::mxfp8: return train_mxfp8(o, fp8);
    case recipe::block: return train_block(o, fp8);
    case recipe::nvfp4: return train_nvfp4(o, fp8);
  }
  return {};
}

std::string pow2(float v) {
  char b[64];
  std::snprintf(b, sizeof b, "%.3g (2^%.1f)", double(v), std::log2(double(v)));
  return b;
}

int run(const options& o) {
  std::printf("tequant example: recipe=%s boundary=%s recompute=%s steps=%d\n", name(o.rec), name(o.bnd), name(o.rc),
              o.steps);
  std::printf("model: %zu -> %zu -> %zu x [residual %zu -> %zu -> %zu] -> %zu, batch %zu, Adam\n", d_in, width,
              n_blocks, width, hidden, width, d_out, batch);
  const run_result fp32 = train(o, false);
  const run_result fp8 = train(o, true);

  // Updates per step: the common case and how many steps differ from exactly one forward and one backward.
  std::map<std::pair<std::uint64_t, std::uint64_t>, int> per_step;
  int wrong = 0;
  for (int k = 0; k < o.steps; ++k) {
    ++per_step[{fp8.forward_updates[k], fp8.backward_updates[k]}];
    wrong += fp8.forward_updates[k] != 1 || fp8.backward_updates[k] != 1;
  }
  // Delayed scaling updates scales; NVFP4 keeps its stochastic-rounding streams as managed state.
  const bool stateful = o.rec == recipe::delayed || o.rec == recipe::nvfp4;
  float lo[2] = {0, 0}, hi[2] = {0, 0};
  bool seen[2] = {false, false};
  for (const auto& t : fp8.scales)
    for (std::size_t k = 0; k < t.lo.size(); ++k) {
      if (!(t.hi[k] > 0.0f)) continue;
      const int d = t.backward ? 1 : 0;
      lo[d] = seen[d] ? std::min(lo[d], t.lo[k]) : t.lo[k];
      hi[d] = seen[d] ? std::max(hi[d], t.hi[k]) : t.hi[k];
      seen[d] = true;
    }

  const double l32 = final_loss(fp32), l8 = final_loss(fp8), gap = (l8 - l32) / l32;
  const char* low = o.rec == recipe::nvfp4 ? "NVFP4" : "FP8";  // the quantized run's format
  std::printf("\n%-34s %14s %14s\n", "", "FP32", low);
  std::printf("%-34s %14.6f %14.6f\n", "final loss (mean of last 10%)", l32, l8);
  const std::string gap_label = std::string("relative gap (") + low + " - FP32) / FP32";
  std::printf("%-34s %14s %+13.2f%%\n", gap_label.c_str(), "", 100.0 * gap);
  std::printf("%-34s %14s ", "updates per step (forward/backward)", "");
  if (!stateful) {
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
  std::printf("%-34s %14s forward  %s .. %s\n", "scale range seen", "", pow2(lo[0]).c_str(), pow2(hi[0]).c_str());
  std::printf("%-34s %14s backward %s .. %s\n", "", "", pow2(lo[1]).c_str(), pow2(hi[1]).c_str());
  std::printf("%-34s %13.2fs %13.2fs\n", "training time", fp32.seconds, fp8.seconds);
  if (stateful && wrong != 0)
    std::printf("\n%d of %d steps did not get exactly one forward and one backward update.%s\n", wrong, o.steps,
                o.bnd == boundary::first_module
                    ? " This is TE's old \"first module owns the backward update\" rule: with recompute, the replayed\n"
                      "modules own it too and flush inside the nested backward. Use --boundary engine, scope or autocast."
                    : "");

  std::filesystem::create_directories(o.out);
  const std::string dir = std::filesystem::absolute(o.out).lexically_normal().string();
  write_loss_csv(dir + "/loss.csv", fp32, fp8);
  write_scales_csv(dir + "/scales.csv", fp8);
  char title[200];
  std::snprintf(title, sizeof title, "tequant example: recipe=%s boundary=%s recompute=%s, %s gap %+.2f%%",
                name(o.rec), name(o.bnd), name(o.rc), low, 100.0 * gap);
  write_plot_svg(dir + "/plot.svg", title, fp32, fp8);
  std::printf("\nwrote %s/loss.csv, scales.csv and plot.svg (open the SVG in a browser)\n", dir.c_str());
  // One line for scripts and tests.
  std::printf("summary: recipe=%s boundary=%s recompute=%s gap_percent=%+.2f within_5_percent=%s updates_1_1=%s\n",
              name(o.rec), name(o.bnd), name(o.rc), 100.0 * gap, std::fabs(gap) <= 0.05 ? "yes" : "no",
              !stateful ? "n/a" : wrong == 0 ? "yes" : "no");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  quickstart::options o;
  o.tty = isatty(STDOUT_FILENO) != 0;
  try {
    if (!quickstart::parse(argc, argv, o)) {
      std::fputs(quickstart::usage, stdout);
      return 0;
    }
  } catch (const quickstart::bad_option& e) {
    std::fprintf(stderr, "quickstart: %s\n\n%s", e.what(), quickstart::usage);
    return 2;
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "\nquickstart: error: %s\n", e.what());
    return 1;
  }
}
