#!/usr/bin/env bash
# Runs tequant's whole test suite: installs what is missing, builds everything that builds here
# (CUDA code is compiled for sm_90 when nvcc exists; its tests skip without a GPU), checks that every
# header compiles on its own, and runs CTest; then the sanitizer builds and the fuzzers. Each stage
# prints its wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
start=$SECONDS
stage_start=$SECONDS
stage() {  # stage <name>: closes the previous stage's timer, opens the next
  local now=$SECONDS
  if [[ -n "${stage_name:-}" ]]; then
    printf '== stage %-28s %5d s (total %5d s)\n' "$stage_name" $((now - stage_start)) $((now - start))
  fi
  stage_name=${1:-}
  stage_start=$now
  if [[ -n "$stage_name" ]]; then echo "== stage $stage_name"; fi
}

stage "install dependencies"
scripts/install-deps.sh all

stage "build (ci preset)"
cmake --preset ci
cmake --build --preset ci -j "$jobs"
cmake --build --preset ci -j "$jobs" --target all_verify_interface_header_sets

stage "ctest (ci preset)"
ctest --preset ci -j "$jobs" --timeout 900

# Figures a change can move but wall time on a shared machine cannot show: instructions per step of
# the manager's benchmark cases (callgrind) and what including tequant costs a translation unit.
# Printed, never asserted.
stage "instructions per step (callgrind)"
scripts/instructions.sh build/instructions

stage "compile time (printed)"
scripts/compile-time.sh

# Sanitizers (clang 14, host backend only: libtorch, MPI and CUDA are not sanitizer-built): ASan+UBSan
# on the host suite and the fuzzers, TSan on the "concurrency" tests (test name = target).
san=(-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTEQUANT_WERROR=ON -DTEQUANT_ENABLE_CUDA=OFF -DTEQUANT_ENABLE_MPI=OFF
     -DTEQUANT_ENABLE_LIBTORCH=OFF -DTEQUANT_BUILD_EXAMPLES=OFF -DTEQUANT_BUILD_BENCHMARKS=OFF)
stage "asan+ubsan build"
cmake -S . -B build/asan "${san[@]}" -DTEQUANT_BUILD_FUZZERS=ON \
      -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake --build build/asan -j "$jobs"

stage "asan+ubsan ctest"
ctest --test-dir build/asan -LE "exhaustive|consumer|compile_fail|graph_shapes" -j "$jobs" --output-on-failure --timeout 900

stage "fuzz: API sequences (60 s)"
mkdir -p build/asan/fuzz_corpus build/asan/fuzz_state_corpus  # new inputs go here; committed seeds are only read
build/asan/tests/reliability/fuzz_api -max_total_time=60 -timeout=20 build/asan/fuzz_corpus tests/reliability/fuzz_corpus

stage "fuzz: state files (60 s)"
# A single allocation above 64 MB is a finding: no seed file justifies one (the largest is 1.4 KB).
build/asan/tests/reliability/fuzz_state -max_total_time=60 -timeout=20 -malloc_limit_mb=64 -max_len=8192 \
  build/asan/fuzz_state_corpus tests/reliability/fuzz_state_corpus

stage "tsan"
cmake -S . -B build/tsan "${san[@]}" -DCMAKE_CXX_FLAGS="-fsanitize=thread"
cmake --build build/tsan -j "$jobs" --target $(ctest --test-dir build/tsan -N -L concurrency | awk '/Test +#/ {print $3}')
ctest --test-dir build/tsan -L concurrency -j "$jobs" --output-on-failure --timeout 900
stage
echo "== all stages passed in $((SECONDS - start)) s"
