#!/usr/bin/env bash
# Runs tequant's whole test suite: installs what is missing, builds everything that builds here
# (CUDA code is compiled for sm_90 when nvcc exists; its tests skip without a GPU), checks that every
# header compiles on its own, and runs CTest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh all
jobs=$(nproc)

cmake --preset ci
cmake --build --preset ci -j "$jobs"
cmake --build --preset ci -j "$jobs" --target all_verify_interface_header_sets
ctest --preset ci -j "$jobs" --timeout 900

# Sanitizers (clang 14, host backend only: libtorch, MPI and CUDA are not sanitizer-built): ASan+UBSan
# on the host suite and 60 s of the API fuzzer, TSan on the "concurrency" tests (test name = target).
san=(-DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTEQUANT_ENABLE_CUDA=OFF -DTEQUANT_ENABLE_MPI=OFF
     -DTEQUANT_ENABLE_LIBTORCH=OFF -DTEQUANT_BUILD_EXAMPLES=OFF -DTEQUANT_BUILD_BENCHMARKS=OFF)
cmake -S . -B build/asan "${san[@]}" -DTEQUANT_BUILD_FUZZERS=ON \
      -DCMAKE_CXX_FLAGS="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cmake --build build/asan -j "$jobs"
ctest --test-dir build/asan -LE "exhaustive|consumer|compile_fail" -j "$jobs" --output-on-failure --timeout 900
mkdir -p build/asan/fuzz_corpus  # new inputs go here; the committed seeds are only read
build/asan/tests/reliability/fuzz_api -max_total_time=60 -timeout=20 build/asan/fuzz_corpus tests/reliability/fuzz_corpus
cmake -S . -B build/tsan "${san[@]}" -DCMAKE_CXX_FLAGS="-fsanitize=thread"
cmake --build build/tsan -j "$jobs" --target $(ctest --test-dir build/tsan -N -L concurrency | awk '/Test +#/ {print $3}')
ctest --test-dir build/tsan -L concurrency -j "$jobs" --output-on-failure --timeout 900
