// SPDX-License-Identifier: Apache-2.0
// Command line of the GPT example.
#pragma once
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>

namespace gpt {

enum class recipe { delayed, current, mxfp8, block, nvfp4 };
enum class boundary { engine, autocast, scope, first_module };
enum class recompute { none, reentrant, nested };

struct options {
  recipe rec = recipe::delayed;
  boundary bnd = boundary::engine;
  recompute rc = recompute::reentrant;
  int steps = 150;
  // The default size: each of the two runs well under 90 s on 2 cores (measured; see docs/benchmarks.md).
  int layers = 2;
  int d_model = 128;
  int heads = 4;
  int context = 64;
  int batch = 16;         // sequences per micro-batch
  int micro_batches = 1;  // gradient accumulation: micro-batches per step, one backward_scope
  int eval_every = 0;     // 0: every steps/10
  int sample_chars = 240;
  float lr = 3e-3f;
  std::string data = TEQUANT_GPT_CORPUS;  // the frozen corpus shipped with the repository
  std::string out = "tequant-gpt-out";
  bool fp8_only = false;  // skip the FP32 twin (tests that compare FP8 runs with each other)
  bool cast_cache = true; // reuse each weight's cast within a step (micro-batches, replays)
  bool identity_casts = false;  // the FP8 run's casts are identities: tequant's bookkeeping, FP32 numbers
  bool quiet = false;
  bool tty = false;
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
/// The quantized run's name in reports: the data format the recipe trains in.
inline const char* format_name(recipe r) { return r == recipe::nvfp4 ? "NVFP4" : "FP8"; }
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
    "usage: gpt [--recipe delayed|current|mxfp8|block|nvfp4] [--boundary engine|autocast|scope|first-module]\n"
    "           [--recompute none|reentrant|nested] [--steps N] [--layers N] [--d-model N] [--heads N]\n"
    "           [--context N] [--batch N] [--micro-batches N] [--eval-every N] [--lr X] [--sample N]\n"
    "           [--data FILE] [--out DIR] [--no-cast-cache] [--identity-casts] [--fp8-only] [--quiet] [--help]\n"
    "\n"
    "Trains a character-level GPT on a frozen text corpus (tequant's own headers and docs) twice, in FP32\n"
    "and with every GEMM operand of its QKV, attention output and MLP projections quantized to FP8 with\n"
    "state managed by tequant, and compares their validation losses.\n"
    "  --recipe         how tensors are scaled (default delayed: TE's DelayedScaling, hybrid E4M3/E5M2;\n"
    "                   nvfp4: TE's NVFP4BlockScaling, 4-bit E2M1)\n"
    "  --boundary       when the backward update is flushed (default engine; first-module reproduces TE's\n"
    "                   old rule and its failure under recompute)\n"
    "  --recompute      activation recompute (default reentrant: each block a reentrant checkpoint; nested\n"
    "                   also checkpoints pairs of blocks; none keeps every activation)\n"
    "  --steps          optimizer steps per run (default 150)\n"
    "  --layers, --d-model, --heads, --context   model size (default 2, 128, 4, 64)\n"
    "  --batch          sequences per micro-batch (default 16)\n"
    "  --micro-batches  micro-batches per step, accumulated inside one backward_scope (default 1)\n"
    "  --eval-every     validation loss every N steps (default steps/10)\n"
    "  --lr             peak Adam learning rate (default 3e-3, warmup then cosine decay)\n"
    "  --sample         characters sampled from the FP8 model at the end (default 240)\n"
    "  --data           the text corpus (default: the one shipped with the repository)\n"
    "  --out            where loss.csv, scales.csv and the plot go (default ./tequant-gpt-out)\n"
    "  --no-cast-cache  cast each weight at every use instead of once per step (tequant::cast_cache)\n"
    "  --identity-casts the second run does all of tequant's bookkeeping (plans, amaxes, scale updates,\n"
    "                   boundaries, replay frames) but casts to FP32 instead of FP8: its losses equal\n"
    "                   FP32's, and its extra time is what the bookkeeping costs\n"
    "  --fp8-only       skip the FP32 run\n"
    "  --quiet          no progress lines\n";

struct bad_option : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses argv; throws bad_option with a message for anything it does not understand.
/// Returns false when --help was given.
inline bool parse(int argc, char** argv, options& o) {
  auto value = [&](int& i, std::string_view flag) -> std::string {
    if (i + 1 >= argc) throw bad_option(std::string(flag) + " needs a value");
    return argv[++i];
  };
  auto number = [&](int& i, std::string_view flag, long lo, long hi) -> int {
    const std::string v = value(i, flag);
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < lo || n > hi)
      throw bad_option(std::string(flag) + " needs a whole number in [" + std::to_string(lo) + ", " +
                       std::to_string(hi) + "], got '" + v + "'");
    return static_cast<int>(n);
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
    } else if (a == "--fp8-only") {
      o.fp8_only = true;
    } else if (a == "--identity-casts") {
      o.identity_casts = true;
    } else if (a == "--no-cast-cache") {
      o.cast_cache = false;
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
      o.steps = number(i, a, 1, 1000000);
    } else if (a == "--layers") {
      o.layers = number(i, a, 1, 64);
    } else if (a == "--d-model") {
      o.d_model = number(i, a, 8, 4096);
    } else if (a == "--heads") {
      o.heads = number(i, a, 1, 64);
    } else if (a == "--context") {
      o.context = number(i, a, 2, 4096);
    } else if (a == "--batch") {
      o.batch = number(i, a, 1, 4096);
    } else if (a == "--micro-batches") {
      o.micro_batches = number(i, a, 1, 1024);
    } else if (a == "--eval-every") {
      o.eval_every = number(i, a, 1, 1000000);
    } else if (a == "--sample") {
      o.sample_chars = number(i, a, 0, 100000);
    } else if (a == "--lr") {
      const std::string v = value(i, a);
      char* end = nullptr;
      const float x = std::strtof(v.c_str(), &end);
      if (v.empty() || *end != '\0' || !(x > 0.0f) || x > 1.0f)
        throw bad_option("--lr needs a number in (0, 1], got '" + v + "'");
      o.lr = x;
    } else if (a == "--data") {
      o.data = value(i, a);
    } else if (a == "--out") {
      o.out = value(i, a);
      if (o.out.empty()) throw bad_option("--out needs a non-empty directory name");
    } else {
      throw bad_option("unknown option '" + std::string(a) + "'");
    }
  }
  if (o.d_model % o.heads != 0)
    throw bad_option("--d-model (" + std::to_string(o.d_model) + ") must be a multiple of --heads (" +
                     std::to_string(o.heads) + ")");
  return true;
}

}  // namespace gpt
