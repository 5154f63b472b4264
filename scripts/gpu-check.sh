#!/usr/bin/env bash
# One-shot GPU check for the CUDA backend (run from the repository root on a machine with a GPU):
# configure + build the CUDA targets for sm_90, run the CUDA tests (and the one-rank NCCL test when
# NCCL is found), run bench_cuda, time PyTorch eager doing the same quantization when torch is
# importable, and print a short table last. Exit status 0 only when everything that should run passed.
# Needs nvcc and CMake there. The GPU image has no doctest and nothing can be downloaded there, so
# first, on the build machine: `bash scripts/gpu-check.sh --prepare` (copies the installed doctest
# header into the git-ignored .gpu-carry/), then call the device tool with
#   command "bash scripts/gpu-check.sh", carry [".gpu-carry"], timeout_s 540.
# Without Google Benchmark the table still comes from the standalone build of benchmarks/bench_cuda.cu.
# Budget: every step's timeout is capped by what is left of TEQUANT_GPU_CHECK_BUDGET (default 420 s),
# so a hang cannot eat the caller's 8 minutes and the table is always printed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
CARRIED_DOCTEST=.gpu-carry/doctest  # holds doctest/doctest.h after --prepare
if [ "${1:-}" = --prepare ]; then
  [ -f /usr/include/doctest/doctest.h ] || scripts/install-deps.sh minimal || exit 1
  mkdir -p "$CARRIED_DOCTEST/doctest" && cp /usr/include/doctest/doctest.h "$CARRIED_DOCTEST/doctest/" || exit 1
  echo "gpu-check: doctest copied to $CARRIED_DOCTEST; now call the device tool with"
  echo "  command \"bash scripts/gpu-check.sh\", carry [\".gpu-carry\"], timeout_s 540"
  exit 0
fi
B=${TEQUANT_GPU_CHECK_DIR:-build/gpu-check}
ARCH=${TEQUANT_CUDA_ARCH:-90}
JOBS=${JOBS:-16}
BUDGET=${TEQUANT_GPU_CHECK_BUDGET:-420}
mkdir -p "$B"
LOG="$B/gpu-check.log"
: >"$LOG"
t0=$(date +%s)
rc=0
say() { echo "[gpu-check $(($(date +%s) - t0))s] $*" | tee -a "$LOG"; }
# Seconds a step may take: its own limit, capped by the budget left minus what the later steps need.
limit() {
  local want=$1 reserve=${2:-30} left
  left=$((BUDGET - ($(date +%s) - t0) - reserve))
  [ "$left" -lt "$want" ] && want=$left
  [ "$want" -lt 1 ] && want=1
  echo "$want"
}
enough_time() { [ $((BUDGET - ($(date +%s) - t0))) -gt "$1" ]; }
run_for() { local s=$1; shift; timeout -k 10 "$s" "$@"; }  # timeout signals the whole process group

if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
say "device: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo 'nvidia-smi unavailable')"
say "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo missing)   cmake: $(cmake --version 2>/dev/null | head -1)"
gpu_seen=0
nvidia-smi -L 2>/dev/null | grep -q '^GPU' && gpu_seen=1

# ---- standalone benchmark and example: plain nvcc, built in the background while CMake works -------
NVCC_FLAGS=(-O3 -std=c++20 --expt-relaxed-constexpr "-arch=sm_${ARCH}" -Iinclude)
( run_for "$(limit 240 150)" nvcc "${NVCC_FLAGS[@]}" -DTEQUANT_BENCH_STANDALONE benchmarks/bench_cuda.cu \
    -o "$B/bench_cuda_standalone" >"$B/standalone-build.log" 2>&1
  echo $? >"$B/standalone-build.rc" ) &
standalone_pid=$!
( run_for "$(limit 240 150)" nvcc "${NVCC_FLAGS[@]}" examples/cuda_training.cu -o "$B/cuda_training" >"$B/example-build.log" 2>&1
  echo $? >"$B/example-build.rc" ) &
example_pid=$!

# ---- which optional packages CMake finds (one cheap probe instead of a configure per combination) ---
probe="$B/probe"
rm -rf "$probe" && mkdir -p "$probe"
printf '%s\n' 'cmake_minimum_required(VERSION 3.24)' 'project(probe LANGUAGES CXX)' \
  'find_package(doctest QUIET)' 'find_package(benchmark QUIET)' \
  'message(STATUS "PROBE doctest=${doctest_FOUND} benchmark=${benchmark_FOUND}")' >"$probe/CMakeLists.txt"
gen=()
keep_going=(-- -k)  # one target that fails to build must not keep the others from being built and run
if ! command -v make >/dev/null 2>&1 && command -v ninja >/dev/null 2>&1; then gen=(-G Ninja); keep_going=(-- -k 0); fi
probe_out=$(run_for "$(limit 60)" cmake "${gen[@]}" -S "$probe" -B "$probe/b" 2>&1 | grep 'PROBE ' || true)
tests=ON
bench=OFF
doctest_args=()
grep -q 'benchmark=1' <<<"$probe_out" && bench=ON
# TEQUANT_GPU_CHECK_CARRIED_DOCTEST=1 takes the carried copy even when one is installed (to test this path).
if ! grep -q 'doctest=1' <<<"$probe_out" || [ "${TEQUANT_GPU_CHECK_CARRIED_DOCTEST:-0}" = 1 ]; then
  if [ -f "$CARRIED_DOCTEST/doctest/doctest.h" ]; then
    # A config file for the carried header, so that tests/CMakeLists.txt's find_package finds it.
    mkdir -p "$B/doctest-config"
    printf '%s\n' 'if(NOT TARGET doctest::doctest)' '  add_library(doctest::doctest INTERFACE IMPORTED)' \
      "  set_target_properties(doctest::doctest PROPERTIES INTERFACE_INCLUDE_DIRECTORIES \"$ROOT/$CARRIED_DOCTEST\")" \
      'endif()' 'set(doctest_FOUND TRUE)' >"$B/doctest-config/doctestConfig.cmake"
    doctest_args=("-Ddoctest_DIR=$ROOT/$B/doctest-config")
    say "doctest not installed: using the carried $CARRIED_DOCTEST"
  else
    tests=OFF
    say "doctest missing: no CUDA test can be built (run 'bash scripts/gpu-check.sh --prepare' on the build machine and carry .gpu-carry)"
  fi
fi
[ "$bench" = OFF ] && say "Google Benchmark missing: bench_cuda (JSON) not built; the standalone bench still runs"

# NCCL: the toolkit's, else the one of the pip package nvidia-nccl-* (PyTorch's), if any.
nccl_args=()
if [ ! -f "$(dirname "$(command -v nvcc)")/../include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
  # The wheels' layout differs between CUDA majors (nvidia/nccl/..., nvidia/cu13/...): search them all.
  nccl_root=$(run_for 30 python3 -c 'import nvidia as m; print(list(m.__path__)[0])' 2>/dev/null || true)
  nccl_h=$( [ -n "$nccl_root" ] && find "$nccl_root" -maxdepth 4 -name nccl.h 2>/dev/null | head -1)
  nccl_so=$( [ -n "$nccl_root" ] && find "$nccl_root" -maxdepth 4 -name 'libnccl.so*' 2>/dev/null | sort | head -1)
  if [ -n "$nccl_h" ] && [ -n "$nccl_so" ]; then
    nccl_args=("-DNCCL_INCLUDE_DIR=$(dirname "$nccl_h")" "-DNCCL_LIBRARY=$nccl_so")
    say "NCCL from $nccl_root"
  fi
fi

# ---- CMake configure and build ------------------------------------------------------------------------
common=("${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTEQUANT_ENABLE_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=${ARCH}"
        -DTEQUANT_BUILD_EXAMPLES=OFF -DTEQUANT_ENABLE_MPI=OFF -DTEQUANT_ENABLE_LIBTORCH=OFF -DTEQUANT_WERROR=OFF
        -DTEQUANT_INSTALL=OFF "${doctest_args[@]}" "${nccl_args[@]}")
have_tests=0
tests_status="not built (no doctest: --prepare, and carry .gpu-carry)"
configured=0
for combo in "$tests $bench" "$tests OFF" "OFF OFF"; do
  read -r t b <<<"$combo"
  rm -rf "$B/cmake"
  if run_for "$(limit 120 200)" cmake -S . -B "$B/cmake" "${common[@]}" -DTEQUANT_BUILD_TESTS="$t" -DTEQUANT_BUILD_BENCHMARKS="$b" >>"$LOG" 2>&1; then
    configured=1
    [ "$t" = ON ] && have_tests=1
    [ "$t" = OFF ] && [ "$tests" = ON ] && tests_status="not built (configure with tests failed; see $LOG)"
    say "configured: tests=$t benchmarks=$b"
    break
  fi
done
[ "$configured" = 1 ] || { say "CMake configure failed in every configuration; see $LOG"; rc=1; }
targets=()
if [ "$configured" = 1 ]; then
  # Every CUDA test target (ctest runs every ^cuda_ test: one not built would be "Not Run") and the
  # NCCL test, read from CTest's list (generator-independent: Ninja's "help" omits executables), and
  # the benchmark when Google Benchmark was found.
  mapfile -t targets < <({
    ctest --test-dir "$B/cmake" -N 2>/dev/null |
      sed -nE 's/^ *Test +#[0-9]+: (cuda_[A-Za-z0-9_]*_test)(_host)?$/\1/p; s/^ *Test +#[0-9]+: (comm_nccl)_(host|device)$/\1/p'
    [ "$b" = ON ] && [ -f benchmarks/bench_cuda.cu ] && echo bench_cuda
  } | sort -u)
fi
grep -qx comm_nccl < <(printf '%s\n' "${targets[@]}") || say "NCCL not found: comm_nccl (one-rank NCCL test) not built"
say "building: ${targets[*]:-nothing} (-j${JOBS})"
if [ ${#targets[@]} -gt 0 ]; then
  run_for "$(limit 300 180)" cmake --build "$B/cmake" -j"$JOBS" --target "${targets[@]}" "${keep_going[@]}" >>"$LOG" 2>&1 ||
    { say "build FAILED or timed out; see $LOG"; rc=1; }
fi

# ---- CUDA tests (and the one-rank NCCL test) -------------------------------------------------------
if [ "$have_tests" = 1 ] && [ -x "$B/cmake/tests/cuda/cuda_backend_test" ]; then
  say "running CUDA tests"
  ctest_rc=0
  # NCCL_DEBUG=WARN: if the one-rank NCCL init fails in the GPU sandbox, its output says why.
  NCCL_DEBUG=${NCCL_DEBUG:-WARN} run_for "$(limit 200 120)" ctest --test-dir "$B/cmake" -R "^(cuda_|comm_nccl)" -j4 --output-on-failure >"$B/ctest.log" 2>&1 || ctest_rc=$?
  summary=$(grep -E 'tests passed|tests failed' "$B/ctest.log" | tail -1)
  skipped=$(grep -c '\*\*\*Skipped' "$B/ctest.log")
  if [ "$ctest_rc" = 124 ] || [ "$ctest_rc" = 137 ]; then
    tests_status="FAILED: ctest timed out (see $B/ctest.log)"; rc=1
  elif [ "$ctest_rc" != 0 ]; then
    failed=$(sed -n '/The following tests FAILED/,$p' "$B/ctest.log" | sed -nE 's/^[[:space:]]*[0-9]+ - ([A-Za-z0-9_]+).*/\1/p' | tr '\n' ' ')
    tests_status="FAILED: $summary: ${failed:-?}(see $B/ctest.log)"; rc=1
  elif [ "$skipped" != 0 ]; then
    # On the GPU check a skipped device test is a failure: it passed without running (no usable device?).
    why=$(grep -m1 -ho 'no usable CUDA device: [^;]*' "$B/cmake/Testing/Temporary/LastTest.log" 2>/dev/null)
    tests_status="FAILED: $skipped test(s) SKIPPED (${why:-no CUDA device}; GPU seen by nvidia-smi: $gpu_seen); $summary"; rc=1
  else
    tests_status="passed: $summary"
  fi
  grep -E "Test +#|Skipped|Failed|Not Run" "$B/ctest.log" | tee -a "$LOG"
else
  [ "$have_tests" = 1 ] && tests_status="not built (build failed; see $LOG)"
  rc=1
fi

# ---- the CUDA example (FP8 training through the manager; exits 1 if it does not learn) -------------
wait "$example_pid"
example_status="not built (see $B/example-build.log)"
if [ "$(cat "$B/example-build.rc" 2>/dev/null)" = 0 ]; then
  say "running examples/cuda_training"
  if ! run_for "$(limit 60 90)" "$B/cuda_training" >"$B/example.txt" 2>&1; then
    example_status="FAILED: $(tail -1 "$B/example.txt") (see $B/example.txt)"; rc=1
  elif grep -q 'no CUDA device' "$B/example.txt"; then  # it exits 0 without a device: not a pass here
    example_status="SKIPPED: $(tail -1 "$B/example.txt")"; rc=1
  else
    example_status="passed: $(tail -1 "$B/example.txt")"
  fi
  tail -3 "$B/example.txt" | tee -a "$LOG"
else
  rc=1
fi

# ---- benchmarks -----------------------------------------------------------------------------------
wait "$standalone_pid"
bench_out="$B/bench-standalone.txt"
: >"$bench_out"
if [ "$(cat "$B/standalone-build.rc" 2>/dev/null)" = 0 ]; then
  say "running bench_cuda (standalone)"
  bench_rc=0
  run_for "$(limit 90 60)" "$B/bench_cuda_standalone" >"$bench_out" 2>&1 || bench_rc=$?
  echo "rc=$bench_rc" >>"$bench_out"
  [ "$bench_rc" = 0 ] || rc=1
  grep -v '^RESULT' "$bench_out" | tee -a "$LOG"
else
  say "standalone bench build FAILED; see $B/standalone-build.log"
  rc=1
fi
if [ -x "$B/cmake/benchmarks/bench_cuda" ] && enough_time 75; then
  say "running bench_cuda (Google Benchmark, JSON in $B/bench_cuda.json)"
  run_for "$(limit 60 45)" "$B/cmake/benchmarks/bench_cuda" --benchmark_out="$B/bench_cuda.json" --benchmark_out_format=json \
    >"$B/bench-gbench.txt" 2>&1 || say "bench_cuda (Google Benchmark) failed or timed out; see $B/bench-gbench.txt"
  grep -E "median" "$B/bench-gbench.txt" | tee -a "$LOG"
fi

# ---- PyTorch eager, the same quantization (optional: no python3 or torch is not a failure) ----------
torch_out="$B/torch.txt"
: >"$torch_out"
if ! enough_time 40; then
  say "no time left for the PyTorch comparison"
elif run_for "$(limit 40 15)" python3 -c "import torch; assert torch.cuda.is_available()" >/dev/null 2>&1; then
  say "timing PyTorch eager (amax, scale, cast to float8_e4m3fn)"
  run_for "$(limit 60 10)" python3 - >"$torch_out" 2>&1 <<'PY'
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
  tee -a "$LOG" <"$torch_out"
else
  say "PyTorch with CUDA not importable: no PyTorch comparison"
fi

# ---- the table (last) -----------------------------------------------------------------------------
echo
echo "================ tequant CUDA check (sm_${ARCH}, $(date -u +%Y-%m-%dT%H:%MZ), $(($(date +%s) - t0)) s) ================"
echo "tests: $tests_status"
echo "example cuda_training: $example_status"
grep -E '^(self-check overall|bench_cuda: )' "$bench_out" || echo "self-check: not run"
awk -F'|' -v torchfile="$torch_out" '
  BEGIN {
    while ((getline line < torchfile) > 0) if (line ~ /^TORCH /) { split(line, p, "|"); sub(/^TORCH /, "", p[1]); torch[p[1]] = p[2] }
    printf "%-44s %9s %9s %8s %7s  %s\n", "kernel (256 MiB input)", "us", "GB/s", "vs copy", "target", "PyTorch eager"
  }
  /^RESULT update_us/ { split($0, q, " "); upd = q[3]; next }
  /^RESULT / {
    name = $1; sub(/^RESULT /, "", name); us = $2; bw = $3
    if (copy == "") copy = bw
    # NVFP4 kernels are the plain first version (one thread per block; the RHT case is the columnwise
    # random Hadamard transform, its bytes checked by the bench self-check and cuda_nvfp4_test): no target yet.
    target = (name ~ /^copy/) ? "" : (name ~ /^nvfp4/ ? "-" : (name ~ /^(mxfp8|block)/ ? ">=80%" : ">=85%"))
    t = ""
    if (name in torch) t = sprintf("%.1f us -> %.2fx (target >=2x)", torch[name], torch[name] / us)
    printf "%-44s %9.1f %9.1f %7.1f%% %7s  %s\n", name, us, bw, 100 * bw / copy, target, t
  }
  END {
    if (upd != "") printf "%-44s %9.2f %9s %8s %7s\n", "delayed update 3000 slots L=1024 (1 launch)", upd, "-", "-", "<=10us"
    if (copy == "") print "no benchmark numbers (see the log above)"
  }' "$bench_out"
echo "overall: $([ "$rc" = 0 ] && echo PASS || echo FAIL)   log: $LOG"
exit "$rc"
