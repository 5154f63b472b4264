#!/usr/bin/env bash
# Builds and runs tequant's main example on the CPU. Extra arguments go to the example (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh minimal
cmake --preset cpu -DTEQUANT_BUILD_TESTS=OFF >/dev/null
cmake --build --preset cpu --target quickstart -j "$(nproc)"
exec ./build/cpu/examples/quickstart "$@"
