// SPDX-License-Identifier: Apache-2.0
// The main example's outputs: loss.csv, scales.csv and plot.svg (an SVG written directly, so the
// example needs no plotting tool).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer.hpp"

namespace quickstart {

inline void write_loss_csv(const std::string& path, const run_result& fp32, const run_result& fp8) {
  std::ofstream f(path);
  f << "step,loss_fp32,loss_fp8,forward_updates_fp8,backward_updates_fp8\n";
  for (std::size_t k = 0; k < fp32.loss.size(); ++k)
    f << k << ',' << fp32.loss[k] << ',' << fp8.loss[k] << ',' << fp8.forward_updates[k] << ','
      << fp8.backward_updates[k] << '\n';
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline void write_scales_csv(const std::string& path, const run_result& fp8) {
  std::ofstream f(path);
  f << "step,slot,direction,scale_min,scale_max\n";
  for (std::size_t k = 0; k < fp8.loss.size(); ++k)
    for (const auto& s : fp8.scales)
      f << k << ',' << s.name << ',' << (s.backward ? "backward" : "forward") << ',' << s.lo[k] << ',' << s.hi[k]
        << '\n';
  if (!f) throw std::runtime_error("cannot write " + path);
}

namespace svg {

struct series {
  std::string label, color;
  const std::vector<float>* y;
  bool dashed = false;
};

/// One panel with a log-scale y axis at (x0, y0), size w x h.
inline void panel(std::string& out, double x0, double y0, double w, double h, const std::string& title,
                  const std::vector<series>& lines, double log_base, const std::string& y_label) {
  double lo = 1e300, hi = -1e300;
  std::size_t n = 0;
  for (const auto& s : lines)
    for (float v : *s.y)
      if (v > 0.0f && std::isfinite(v)) {
        lo = std::min(lo, std::log(double(v)) / std::log(log_base));
        hi = std::max(hi, std::log(double(v)) / std::log(log_base));
      }
  for (const auto& s : lines) n = std::max(n, s.y->size());
  if (lo > hi) lo = hi = 0.0;
  lo = std::floor(lo);
  hi = std::max(std::ceil(hi), lo + 1.0);
  auto X = [&](double i) { return x0 + w * (n > 1 ? i / double(n - 1) : 0.0); };
  auto Y = [&](double lv) { return y0 + h - h * (lv - lo) / (hi - lo); };
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "<rect x='%.1f' y='%.1f' width='%.1f' height='%.1f' fill='none' stroke='#888'/>\n"
                "<text x='%.1f' y='%.1f' font-size='15' font-weight='bold'>%s</text>\n",
                x0, y0, w, h, x0, y0 - 10, title.c_str());
  out += buf;
  const int step = std::max(1, int(std::ceil((hi - lo) / 8.0)));
  for (int e = int(lo); e <= int(hi); e += step) {
    std::snprintf(buf, sizeof buf,
                  "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='#ddd'/>"
                  "<text x='%.1f' y='%.1f' font-size='11' text-anchor='end'>%g^%d</text>\n",
                  x0, x0 + w, Y(e), Y(e), x0 - 4, Y(e) + 4, log_base, e);
    out += buf;
  }
  for (int t = 0; t <= 5; ++t) {
    const double i = double(n > 1 ? n - 1 : 0) * t / 5.0;
    std::snprintf(buf, sizeof buf, "<text x='%.1f' y='%.1f' font-size='11' text-anchor='middle'>%d</text>\n", X(i),
                  y0 + h + 15, int(std::lround(i)));
    out += buf;
  }
  std::snprintf(buf, sizeof buf,
                "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle'>step</text>"
                "<text x='%.1f' y='%.1f' font-size='12' text-anchor='middle' transform='rotate(-90 %.1f %.1f)'>%s</text>\n",
                x0 + w / 2, y0 + h + 32, x0 - 48, y0 + h / 2, x0 - 48, y0 + h / 2, y_label.c_str());
  out += buf;
  for (const auto& s : lines) {
    out += "<polyline fill='none' stroke-width='1.4' stroke='" + s.color + "'" +
           (s.dashed ? " stroke-dasharray='5,3'" : "") + " points='";
    for (std::size_t i = 0; i < s.y->size(); ++i) {
      const float v = (*s.y)[i];
      if (!(v > 0.0f) || !std::isfinite(v)) continue;
      std::snprintf(buf, sizeof buf, "%.1f,%.1f ", X(double(i)), Y(std::log(double(v)) / std::log(log_base)));
      out += buf;
    }
    out += "'/>\n";
  }
}

inline void legend(std::string& out, double x, double y, const std::vector<series>& lines) {
  char buf[256];
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const double yy = y + 16.0 * double(i);
    std::snprintf(buf, sizeof buf,
                  "<line x1='%.1f' x2='%.1f' y1='%.1f' y2='%.1f' stroke='%s' stroke-width='2'%s/>"
                  "<text x='%.1f' y='%.1f' font-size='11'>%s</text>\n",
                  x, x + 24, yy, yy, lines[i].color.c_str(), lines[i].dashed ? " stroke-dasharray='5,3'" : "",
                  x + 30, yy + 4, lines[i].label.c_str());
    out += buf;
  }
}

}  // namespace svg

/// Loss curves (top) and the largest scale each quantized slot used per step (bottom).
inline void write_plot_svg(const std::string& path, const std::string& title, const run_result& fp32,
                           const run_result& fp8) {
  static const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"};
  std::string s =
      "<svg xmlns='http://www.w3.org/2000/svg' width='1000' height='820' font-family='sans-serif'>\n"
      "<rect width='100%' height='100%' fill='white'/>\n";
  s += "<text x='20' y='24' font-size='16'>" + title + "</text>\n";
  std::vector<svg::series> loss{{"FP32", "#1f77b4", &fp32.loss}, {"FP8 (tequant)", "#d62728", &fp8.loss, true}};
  svg::panel(s, 80, 70, 680, 280, "training loss (log scale)", loss, 10.0, "loss");
  svg::legend(s, 780, 90, loss);
  std::vector<svg::series> scales, keys;
  for (std::size_t i = 0; i < fp8.scales.size(); ++i) {
    const auto& t = fp8.scales[i];
    const std::string color = palette[(i / 3) % 7];
    scales.push_back({t.name, color, &t.hi, t.backward});
    if (i % 3 == 0) keys.push_back({t.name.substr(0, t.name.find(".input")), color, &t.hi});
  }
  keys.push_back({"(solid: input, weight;", "#fff", nullptr});
  keys.push_back({" dashed: grad_output)", "#fff", nullptr});
  svg::panel(s, 80, 430, 680, 330, "scale per quantized tensor (largest block scale per step, log2)", scales, 2.0,
             "scale");
  svg::legend(s, 780, 450, keys);
  s += "</svg>\n";
  std::ofstream f(path);
  f << s;
  if (!f) throw std::runtime_error("cannot write " + path);
}

}  // namespace quickstart
