// SPDX-License-Identifier: Apache-2.0
// Command line of the main example.
#pragma once
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace quickstart {

enum class recipe { delayed, current, mxfp8, block, nvfp4 };
enum class boundary { engine, autocast, scope, first_module };
enum class recompute { none, reentrant, nested };

struct options {
  recipe rec = recipe::delayed;
  boundary bnd = boundary::engine;
  recompute rc = recompute::reentrant;
  int steps = 300;
  std::string out = "tequant-example-out";
  bool quiet = false;  // no progress lines (tests)
  bool tty = false;    // stdout is a terminal: rewrite the progress line in place
};

inline const char* name(recipe r) {
  switch (r) {
    case recipe::delayed: return "delayed";
    case recipe::current: return "current";
    case recipe::mxfp8: return "mxfp8";
    case recipe::block: return "block";
    case recipe::nvfp4: return "nvfp4";
  }
  return "?";
}
inline const char* name(boundary b) {
  switch (b) {
    case boundary::engine: return "engine";
    case boundary::autocast: return "autocast";
    case boundary::scope: return "scope";
    case boundary::first_module: return "first-module";
  }
  return "?";
}
inline const char* name(recompute r) {
  switch (r) {
    case recompute::none: return "none";
    case recompute::reentrant: return "reentrant";
    case recompute::nested: return "nested";
  }
  return "?";
}

inline constexpr const char* usage =
    "usage: quickstart [--recipe delayed|current|mxfp8|block|nvfp4]\n"
    "                  [--boundary engine|autocast|scope|first-module]\n"
    "                  [--recompute none|reentrant|nested] [--steps N] [--out DIR] [--quiet] [--help]\n"
    "\n"
    "Trains a small residual MLP on a synthetic regression task twice, in FP32 and with FP8 quantization\n"
    "state managed by tequant, and compares them.\n"
    "  --recipe     how tensors are scaled (default delayed: TE's DelayedScaling, hybrid E4M3/E5M2;\n"
    "               nvfp4: TE's NVFP4BlockScaling, 4-bit E2M1 with E4M3 block scales)\n"
    "  --boundary   when the backward update is flushed (default engine: a callback at the end of the\n"
    "               outermost backward task; first-module reproduces TE's old rule and its failure)\n"
    "  --recompute  activation recompute of the residual branches (default reentrant; nested puts the\n"
    "               per-branch checkpoints inside a checkpoint of the whole trunk)\n"
    "  --steps      training steps per run (default 300)\n"
    "  --out        where loss.csv, scales.csv and plot.svg go (default ./tequant-example-out)\n"
    "  --quiet      no progress lines\n";

struct bad_option : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses argv; throws bad_option with a message for anything it does not understand.
/// Returns false when --help was given.
inline bool parse(int argc, char** argv, options& o) {
  auto value = [&](int& i, std::string_view flag) -> std::string_view {
    if (i + 1 >= argc) throw bad_option(std::string(flag) + " needs a value");
    return argv[++i];
  };
  auto bad_value = [](std::string_view flag, std::string_view v, const char* allowed) {
    return bad_option("unknown value '" + std::string(v) + "' for " + std::string(flag) + " (expected " + allowed +
                      ")");
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--help" || a == "-h") return false;
    if (a == "--quiet") {
      o.quiet = true;
    } else if (a == "--recipe") {
      const auto v = value(i, a);
      if (v == "delayed") o.rec = recipe::delayed;
      else if (v == "current") o.rec = recipe::current;
      else if (v == "mxfp8") o.rec = recipe::mxfp8;
      else if (v == "block") o.rec = recipe::block;
      else if (v == "nvfp4") o.rec = recipe::nvfp4;
      else throw bad_value(a, v, "delayed, current, mxfp8, block or nvfp4");
    } else if (a == "--boundary") {
      const auto v = value(i, a);
      if (v == "engine") o.bnd = boundary::engine;
      else if (v == "autocast") o.bnd = boundary::autocast;
      else if (v == "scope") o.bnd = boundary::scope;
      else if (v == "first-module") o.bnd = boundary::first_module;
      else throw bad_value(a, v, "engine, autocast, scope or first-module");
    } else if (a == "--recompute") {
      const auto v = value(i, a);
      if (v == "none") o.rc = recompute::none;
      else if (v == "reentrant") o.rc = recompute::reentrant;
      else if (v == "nested") o.rc = recompute::nested;
      else throw bad_value(a, v, "none, reentrant or nested");
    } else if (a == "--steps") {
      const std::string v(value(i, a));
      char* end = nullptr;
      const long n = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || n < 1 || n > 1000000)
        throw bad_option("--steps needs a whole number in [1, 1000000], got '" + v + "'");
      o.steps = static_cast<int>(n);
    } else if (a == "--out") {
      o.out = std::string(value(i, a));
      if (o.out.empty()) throw bad_option("--out needs a non-empty directory name");
    } else {
      throw bad_option("unknown option '" + std::string(a) + "'");
    }
  }
  return true;
}

}  // namespace quickstart
