// SPDX-License-Identifier: Apache-2.0
// The GPT example's plot: a gnuplot script over loss.csv and scales.csv (plot.gp, kept so that the plot
// can be redrawn or restyled), rendered to plot.svg and plot.png when gnuplot is installed (Debian:
// gnuplot-nox; scripts/install-deps.sh example installs it).
#pragma once
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace gpt {

/// What the plot shows: loss.csv has FP32 columns unless the run was FP8 only; scales.csv has
/// `scale_rows` rows per step (one per linear and role, roles cycling input, weight, grad_output).
struct plot_request {
  std::string dir;           // where loss.csv and scales.csv are; plot.* go there too
  std::string title;         // first line of the plot
  std::string fp8_label;     // "FP8 (delayed)" or "identity casts"
  bool has_fp32 = true;
  std::size_t scale_rows = 0;
};

/// The gnuplot commands of both panels (no terminal, no output).
inline std::string plot_panels(const plot_request& r) {
  std::string s;
  s += "set datafile separator ','\n";
  s += "set multiplot layout 2,1 title '" + r.title + "' noenhanced\n";
  s += "set key top right\nset autoscale xfix\nset grid\nset xlabel 'step'\nset ylabel 'loss (nats per character)'\n";
  s += "set title 'training and validation loss'\n";
  s += "plot ";
  if (r.has_fp32)
    s += "'loss.csv' skip 1 using 1:2 with lines lw 1 lc rgb '#9ecae1' title 'FP32 train', "
         "'loss.csv' skip 1 using 1:4 with linespoints pt 7 ps 0.6 lw 2 lc rgb '#1f77b4' title 'FP32 validation', ";
  s += "'loss.csv' skip 1 using 1:3 with lines lw 1 lc rgb '#fcae91' title '" + r.fp8_label + " train', "
       "'loss.csv' skip 1 using 1:5 with linespoints pt 5 ps 0.6 lw 2 dt 2 lc rgb '#d62728' title '" + r.fp8_label +
       " validation'\n";
  s += "set title 'largest scale per step, per quantized GEMM operand'\nset logscale y 2\nset format y '2^{%L}'\n"
       "set ylabel 'scale'\nset key bottom right opaque\n";
  if (r.scale_rows == 0) {
    s += "unset logscale y\nset format y '%g'\nplot 2 with lines notitle\n";  // no scales: keep the layout
  } else {
    // Row i of each step's block of scale_rows rows is one operand: `every N::i` follows it over the steps.
    s += "roles = 'input weight grad_output'\ncolors = '#7b3294 #1a9850 #2c7bb6'\n";
    s += "plot for [i=0:" + std::to_string(r.scale_rows - 1) + "] 'scales.csv' skip 1 every " +
         std::to_string(r.scale_rows) +
         "::i using 1:($5 > 0 ? $5 : NaN) with lines lw 1 lc rgb word(colors, i % 3 + 1) title (i < 3 ? word(roles, i + 1) : '') noenhanced\n";
  }
  s += "unset multiplot\n";
  return s;
}

/// Writes plot.gp into r.dir and runs gnuplot on it when it is installed. Returns what it did, for the report.
inline std::string write_plot(const plot_request& r) {
  const std::string gp = r.dir + "/plot.gp";
  {
    std::ofstream f(gp);
    const std::string panels = plot_panels(r);
    f << "# Redraw with: gnuplot plot.gp (in this folder). Written by the tequant GPT example.\n"
      << "set terminal svg size 1000,800 dynamic font 'sans,12' background '#ffffff'\nset output 'plot.svg'\n"
      << panels << "set terminal pngcairo size 1000,800 font 'sans,10' background '#ffffff'\nset output 'plot.png'\n"
      << "reset\n" << panels;
    if (!f) throw std::runtime_error("cannot write " + gp);
  }
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0)
    return "plot.gp (no gnuplot on PATH to draw plot.svg and plot.png; Debian: apt-get install gnuplot-nox)";
  std::string quoted = "'";
  for (char c : r.dir) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  quoted += "'";
  if (std::system(("cd " + quoted + " && gnuplot plot.gp").c_str()) != 0)
    return "plot.gp (gnuplot failed on it: plot.svg and plot.png may be missing)";
  return "plot.svg, plot.png (and plot.gp, to redraw them)";
}

}  // namespace gpt
