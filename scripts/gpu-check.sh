#!/usr/bin/env bash
# One-shot GPU check for the CUDA backend (run from the repository root on a machine with a GPU):
# configure + build the CUDA targets for sm_90, run the CUDA tests, run bench_cuda, time PyTorch eager
# doing the same quantization when torch is importable, and print a short table last.
# Needs nvcc and CMake only: without doctest the tests are skipped (reported), without Google
# Benchmark the table still comes from the standalone build of benchmarks/bench_cuda.cu. Nothing is
# downloaded. Budget: well under 8 minutes on an H200 with 16 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
B=${TEQUANT_GPU_CHECK_DIR:-build/gpu-check}
ARCH=${TEQUANT_CUDA_ARCH:-90}
JOBS=${JOBS:-16}
mkdir -p "$B"
LOG="$B/gpu-check.log"
: >"$LOG"
t0=$(date +%s)
say() { echo "[gpu-check $(($(date +%s) - t0))s] $*" | tee -a "$LOG"; }

say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi unavailable')"
say "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo missing)   cmake: $(cmake --version 2>/dev/null | head -1)"

# ---- standalone benchmark: plain nvcc, built in the background while CMake works ------------------
NVCC_FLAGS=(-O3 -std=c++20 --expt-relaxed-constexpr "-arch=sm_${ARCH}" -Iinclude -DTEQUANT_BENCH_STANDALONE)
( timeout 300 nvcc "${NVCC_FLAGS[@]}" benchmarks/bench_cuda.cu -o "$B/bench_cuda_standalone" >"$B/standalone-build.log" 2>&1
  echo $? >"$B/standalone-build.rc" ) &
standalone_pid=$!
( timeout 300 nvcc "${NVCC_FLAGS[@]}" examples/cuda_training.cu -o "$B/cuda_training" >"$B/example-build.log" 2>&1
  echo $? >"$B/example-build.rc" ) &
example_pid=$!

# ---- CMake: tests when doctest is there, bench_cuda when Google Benchmark is there -----------------
common=(-DCMAKE_BUILD_TYPE=Release -DTEQUANT_ENABLE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${ARCH}" -DTEQUANT_BUILD_EXAMPLES=OFF
        -DTEQUANT_ENABLE_MPI=OFF -DTEQUANT_ENABLE_LIBTORCH=OFF -DTEQUANT_WERROR=OFF -DTEQUANT_INSTALL=OFF)
# Tests need doctest, benchmarks need Google Benchmark (both REQUIRED at configure time): try the
# richest configuration first and fall back, saying what is missing.
have_tests=0
tests_status="not built"
configured=0
for combo in "ON ON" "OFF ON" "ON OFF" "OFF OFF"; do
  read -r tests bench <<<"$combo"
  rm -rf "$B/cmake"
  if cmake -S . -B "$B/cmake" "${common[@]}" -DTEQUANT_BUILD_TESTS=$tests -DTEQUANT_BUILD_BENCHMARKS=$bench >>"$LOG" 2>&1; then
    configured=1
    [ "$tests" = ON ] && have_tests=1
    [ "$tests" = OFF ] && tests_status="not built (configure with tests failed: doctest-dev missing?)"
    [ "$bench" = OFF ] && say "Google Benchmark missing: bench_cuda (JSON) not built; the standalone bench still runs"
    say "configured: tests=$tests benchmarks=$bench"
    break
  fi
done
[ "$configured" = 1 ] || say "CMake configure failed in every configuration; see $LOG"
targets=()
avail=$(cmake --build "$B/cmake" --target help 2>/dev/null)
for t in cuda_numerics_test cuda_backend_test cuda_manager_test bench_cuda; do
  grep -q "^\.\.\. $t\$" <<<"$avail" && targets+=("$t")
done
say "building: ${targets[*]:-nothing} (-j${JOBS})"
if [ ${#targets[@]} -gt 0 ]; then
  timeout 360 cmake --build "$B/cmake" -j"$JOBS" --target "${targets[@]}" >>"$LOG" 2>&1 || say "build FAILED; see $LOG"
fi

# ---- CUDA tests -----------------------------------------------------------------------------------
if [ "$have_tests" = 1 ] && [ -x "$B/cmake/tests/cuda/cuda_backend_test" ]; then
  say "running CUDA tests"
  if timeout 240 ctest --test-dir "$B/cmake" -R "^cuda_" --output-on-failure >"$B/ctest.log" 2>&1; then
    tests_status="passed: $(grep -E 'tests passed' "$B/ctest.log" | tail -1)"
  else
    tests_status="FAILED: $(grep -E 'tests passed|tests failed' "$B/ctest.log" | tail -1) (see $B/ctest.log)"
  fi
  grep -E "Test +#|Skipped|Failed" "$B/ctest.log" | tee -a "$LOG"
elif [ "$have_tests" = 1 ]; then
  tests_status="not built (build failed; see $LOG)"
fi

# ---- the CUDA example (FP8 training through the manager; exits 1 if it does not learn) -------------
wait "$example_pid"
example_status="not built (see $B/example-build.log)"
if [ "$(cat "$B/example-build.rc" 2>/dev/null)" = 0 ]; then
  say "running examples/cuda_training"
  if timeout 60 "$B/cuda_training" >"$B/example.txt" 2>&1; then example_status="passed: $(tail -1 "$B/example.txt")"
  else example_status="FAILED: $(tail -1 "$B/example.txt") (see $B/example.txt)"; fi
  tail -3 "$B/example.txt" | tee -a "$LOG"
fi

# ---- benchmarks -----------------------------------------------------------------------------------
wait "$standalone_pid"
bench_out="$B/bench-standalone.txt"
: >"$bench_out"
if [ "$(cat "$B/standalone-build.rc" 2>/dev/null)" = 0 ]; then
  say "running bench_cuda (standalone)"
  timeout 120 "$B/bench_cuda_standalone" >"$bench_out" 2>&1
  echo "rc=$?" >>"$bench_out"
  grep -v '^RESULT' "$bench_out" | tee -a "$LOG"
else
  say "standalone bench build FAILED; see $B/standalone-build.log"
fi
if [ -x "$B/cmake/benchmarks/bench_cuda" ]; then
  say "running bench_cuda (Google Benchmark, JSON in $B/bench_cuda.json)"
  timeout 120 "$B/cmake/benchmarks/bench_cuda" --benchmark_out="$B/bench_cuda.json" --benchmark_out_format=json \
    >"$B/bench-gbench.txt" 2>&1 || say "bench_cuda (Google Benchmark) failed; see $B/bench-gbench.txt"
  grep -E "median" "$B/bench-gbench.txt" | tee -a "$LOG"
fi

# ---- PyTorch eager, the same quantization -----------------------------------------------------------
torch_out="$B/torch.txt"
: >"$torch_out"
if timeout 60 python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
  say "timing PyTorch eager (amax, scale, cast to float8_e4m3fn)"
  timeout 120 python3 - >"$torch_out" 2>&1 <<'PY'
import torch
n_bytes = 256 << 20
def median_us(fn, reps=30):
    for _ in range(3): fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    ts.sort(); return ts[len(ts) // 2]
g = torch.Generator(device="cuda").manual_seed(1)
x16 = torch.randn(n_bytes // 2, device="cuda", dtype=torch.bfloat16, generator=g)
x32 = torch.randn(n_bytes // 4, device="cuda", dtype=torch.float32, generator=g)
amax_buf = torch.zeros((), device="cuda")
scale = torch.tensor(3.5, device="cuda")
def current_bf16():  # current scaling: amax, scale, saturating cast (torch's cast does not saturate)
    amax = x16.abs().amax().float()
    s = torch.where(amax > 0, 448.0 / amax, torch.ones_like(amax))
    return (x16.float() * s).clamp_(-448.0, 448.0).to(torch.float8_e4m3fn), 1.0 / s
def delayed_fp32():  # delayed scaling: cast with the known scale, record the amax
    torch.maximum(amax_buf, x32.abs().amax(), out=amax_buf)
    return (x32 * scale).clamp_(-448.0, 448.0).to(torch.float8_e4m3fn)
print("TORCH tensor bf16 current (amax, scale, cast)|%.1f" % median_us(current_bf16))
print("TORCH tensor fp32 delayed (cast+amax)|%.1f" % median_us(delayed_fp32))
print("torch", torch.__version__)
PY
  cat "$torch_out" | tee -a "$LOG"
else
  say "PyTorch with CUDA not importable: no PyTorch comparison"
fi

# ---- the table (last) -----------------------------------------------------------------------------
echo
echo "================ tequant CUDA check (sm_${ARCH}, $(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - t0)) s) ================"
echo "tests: $tests_status"
echo "example cuda_training: $example_status"
grep -E '^self-check overall' "$bench_out" || echo "self-check: not run"
awk -F'|' -v torchfile="$torch_out" '
  BEGIN {
    while ((getline line < torchfile) > 0) if (line ~ /^TORCH /) { split(line, p, "|"); sub(/^TORCH /, "", p[1]); torch[p[1]] = p[2] }
    printf "%-44s %9s %9s %8s %7s  %s\n", "kernel (256 MiB input)", "us", "GB/s", "vs copy", "target", "PyTorch eager"
  }
  /^RESULT update_us/ { split($0, q, " "); upd = q[3]; next }
  /^RESULT / {
    name = $1; sub(/^RESULT /, "", name); us = $2; bw = $3
    if (copy == "") copy = bw
    target = (name ~ /^copy/) ? "" : (name ~ /^(mxfp8|block)/ ? ">=80%" : ">=85%")
    t = ""
    if (name in torch) t = sprintf("%.1f us -> %.2fx (target >=2x)", torch[name], torch[name] / us)
    printf "%-44s %9.1f %9.1f %7.1f%% %7s  %s\n", name, us, bw, 100 * bw / copy, target, t
  }
  END {
    if (upd != "") printf "%-44s %9.2f %9s %8s %7s\n", "delayed update 3000 slots L=1024 (1 launch)", upd, "-", "-", "<=10us"
    if (copy == "") print "no benchmark numbers (see the log above)"
  }' "$bench_out"
echo "log: $LOG"
