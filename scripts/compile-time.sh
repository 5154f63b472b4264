#!/usr/bin/env bash
# What including tequant costs a user's translation unit: preprocessed lines and -fsyntax-only wall
# time (median of 3) for a typical trainer TU, the standard headers such a TU needs (the floor), the
# umbrella header, and the ratios to the floor; each header-only and with TEQUANT_SEPARATE_HOST_KERNELS.
# Then the -O3 compile of a TU with 16 managers (benchmarks/compile_time/sixteen_managers.cpp), both
# ways, and of the one TU that compiles the kernels in the separate mode. Prints; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=${CXX:-g++}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

cat >"$tmp/typical.cpp" <<'CPP'
#include <tequant/backend/host.hpp>
#include <tequant/boundary/engine_callback.hpp>
#include <tequant/checkpoint/stacked_recompute.hpp>
#include <tequant/manager.hpp>
#include <tequant/recipe/delayed.hpp>
struct hooks { bool in_backward() const { return false; } bool queue_callback(void (*)(void*), void*) { return false; } };
tequant::quantization_manager<tequant::delayed_scaling<>, tequant::engine_callback<hooks>> m;
CPP
cat >"$tmp/floor.cpp" <<'CPP'
#include <vector>
#include <atomic>
#include <span>
#include <string>
#include <string_view>
#include <cstdint>
#include <type_traits>
#include <array>
#include <algorithm>
#include <concepts>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>
#include <memory>
#include <stdexcept>
#include <mutex>
CPP
cat >"$tmp/umbrella.cpp" <<'CPP'
#include <tequant/tequant.hpp>
CPP
for tu in typical umbrella; do
  { echo '#define TEQUANT_SEPARATE_HOST_KERNELS'; cat "$tmp/$tu.cpp"; } >"$tmp/${tu}_separate.cpp"
done

measure() {  # measure <file>: prints "lines seconds"
  local f=$1 lines t best=()
  lines=$($cxx -std=c++20 -Iinclude -E "$f" | wc -l)
  for _ in 1 2 3; do
    local s e
    s=$(date +%s.%N)
    $cxx -std=c++20 -Iinclude -fsyntax-only "$f"
    e=$(date +%s.%N)
    best+=("$(awk -v a="$s" -v b="$e" 'BEGIN { print b - a }')")
  done
  t=$(printf '%s\n' "${best[@]}" | sort -g | sed -n 2p)
  echo "$lines $t"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
read -r fl ft < <(measure "$tmp/floor.cpp")
printf '%-58s %10s %9s %9s %9s\n' "translation unit ($cxx -fsyntax-only)" "lines" "seconds" "x lines" "x time"
printf '%-58s %10d %9.2f %9.2f %9.2f\n' "standard headers a trainer needs (floor)" "$fl" "$ft" 1 1
row() {  # row <label> <file>
  local l t
  read -r l t < <(measure "$2")
  printf '%-58s %10d %9.2f %9s %9s\n' "$1" "$l" "$t" "$(ratio "$l" "$fl")" "$(ratio "$t" "$ft")"
}
row "typical trainer TU (delayed+engine_callback), header-only" "$tmp/typical.cpp"
row "typical trainer TU, TEQUANT_SEPARATE_HOST_KERNELS" "$tmp/typical_separate.cpp"
row "umbrella tequant/tequant.hpp, header-only" "$tmp/umbrella.cpp"
row "umbrella, TEQUANT_SEPARATE_HOST_KERNELS" "$tmp/umbrella_separate.cpp"

compile_o3() {  # compile_o3 <file> [flags...]: wall seconds of one -O3 compile
  local f=$1 s e
  shift
  s=$(date +%s.%N)
  $cxx -std=c++20 -Iinclude -O3 "$@" -c "$f" -o "$tmp/out.o"
  e=$(date +%s.%N)
  awk -v a="$s" -v b="$e" 'BEGIN { printf "%.1f", b - a }'
}
echo '#include <tequant/backend/host_kernels_instantiate.hpp>' >"$tmp/instantiate.cpp"
sixteen=benchmarks/compile_time/sixteen_managers.cpp
printf '\n%-58s %9s\n' "-O3 compile ($cxx -c)" "seconds"
printf '%-58s %9s\n' "16 managers, header-only" "$(compile_o3 "$sixteen")"
printf '%-58s %9s\n' "16 managers, TEQUANT_SEPARATE_HOST_KERNELS" "$(compile_o3 "$sixteen" -DTEQUANT_SEPARATE_HOST_KERNELS)"
printf '%-58s %9s\n' "the kernels' TU (host_kernels_instantiate.hpp), once" "$(compile_o3 "$tmp/instantiate.cpp")"
