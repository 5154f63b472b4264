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
