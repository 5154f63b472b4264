#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions per training step of each bench_manager case, and of bench_policies' delayed-scaling
# layers with and without stacked recompute (manager vs the hand-written floor), counted by callgrind (wall time on a
# shared machine moves by a few percent between runs; instruction counts do not), and each manager
# case as a ratio to its by_hand twin. Each case runs twice (a few steps, then more); the difference
# divided by the extra steps is the per-step count, with the set-up cancelled out. Prints; asserts
# nothing. The benchmarks are built for x86-64-v3: valgrind stops (SIGILL) on AVX-512 instructions,
# which -march=native emits on CPUs that have them.
#
#   scripts/instructions.sh [build-dir]        (default: build/instructions)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/instructions}
command -v valgrind >/dev/null || { echo "instructions.sh: valgrind is not installed" >&2; exit 2; }

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS=-march=x86-64-v3 \
  -DTEQUANT_BUILD_BENCHMARKS=ON -DTEQUANT_BENCH_NATIVE=OFF -DTEQUANT_BUILD_TESTS=OFF -DTEQUANT_BUILD_EXAMPLES=OFF \
  -DTEQUANT_ENABLE_CUDA=OFF -DTEQUANT_ENABLE_MPI=OFF -DTEQUANT_ENABLE_LIBTORCH=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target bench_manager bench_policies >/dev/null
bin=$build/benchmarks/bench_manager

count() {  # count <case> <steps>: instructions of the whole run
  valgrind --tool=callgrind --callgrind-out-file=/dev/null "$bin" --steps="$2" --case="$1" 2>&1 |
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p'
}

per_step() {  # per_step <case> <few> <more>
  local a b
  a=$(count "$1" "$2")
  b=$(count "$1" "$3")
  echo $(((b - a) / ($3 - $2)))
}

# x checked: against by_hand_checked, the twin that also makes the cast handle's key check per cast
# (one load, a compare and a branch: what the manager does on purpose; bookkeeping only).
printf '%-40s %14s %12s %12s\n' "case (100 modules per step)" "instr/step" "x by_hand" "x checked"
ratio() { python3 -c "print(f'{$1 / $2:.3f}')"; }
for variant in bookkeeping casts; do
  if [[ $variant == bookkeeping ]]; then few=50 more=550; else few=5 more=25; fi
  base=$(per_step "step100/$variant/by_hand" $few $more)
  printf '%-40s %14d %12s\n' "step100/$variant/by_hand" "$base" "1.000"
  checked=
  if [[ $variant == bookkeeping ]]; then
    checked=$(per_step "step100/$variant/by_hand_checked" $few $more)
    printf '%-40s %14d %12s %12s\n' "step100/$variant/by_hand_checked" "$checked" "$(ratio "$checked" "$base")" "1.000"
  fi
  for b in engine_callback autocast_entry explicit_scope; do
    n=$(per_step "step100/$variant/$b" $few $more)
    printf '%-40s %14d %12s %12s\n' "step100/$variant/$b" "$n" "$(ratio "$n" "$base")" "${checked:+$(ratio "$n" "$checked")}"
  done
done

# bench_policies: 96 checkpointed layers per step, bookkeeping only (no kernels).
bin=$build/benchmarks/bench_policies
printf '\n%-40s %14s %12s\n' "bench_policies case (96 layers)" "instr/step" "x floor"
for recompute in none stacked; do
  base=$(per_step "delayed/floor/$recompute/N96/no_kernels" 20 220)
  printf '%-40s %14d %12s\n' "delayed/floor/$recompute/N96/no_kernels" "$base" "1.000"
  n=$(per_step "delayed/engine/$recompute/N96/no_kernels" 20 220)
  printf '%-40s %14d %12s\n' "delayed/engine/$recompute/N96/no_kernels" "$n" "$(ratio "$n" "$base")"
done
