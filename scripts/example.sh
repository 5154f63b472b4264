#!/usr/bin/env bash
# Builds and runs tequant's main example on the CPU: a character-level GPT trained twice, in FP32 and
# in FP8. Extra arguments go to the example (try --help).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh example
start=$(date +%s)
cmake --preset cpu -DTEQUANT_BUILD_TESTS=OFF >/dev/null
cmake --build --preset cpu --target gpt -j "$(nproc)"
echo "tequant: built the GPT example in $(($(date +%s) - start)) s"
exec ./build/cpu/examples/gpt "$@"
