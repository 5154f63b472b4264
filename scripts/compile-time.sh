#!/usr/bin/env bash
# What including tequant costs a user's translation unit: preprocessed lines and -fsyntax-only wall
# time (median of 3) for a typical trainer TU, the standard headers such a TU needs (the floor), the
# umbrella header, and the ratios to the floor. Prints; asserts nothing (machines are shared).
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

read -r fl ft < <(measure "$tmp/floor.cpp")
read -r tl tt < <(measure "$tmp/typical.cpp")
read -r ul ut < <(measure "$tmp/umbrella.cpp")
printf '%-44s %10s %9s %9s\n' "translation unit ($cxx -fsyntax-only)" "lines" "seconds" "x floor"
printf '%-44s %10d %9.2f %9.2f\n' "standard headers a trainer needs (floor)" "$fl" "$ft" 1
printf '%-44s %10d %9.2f %9.2f\n' "typical trainer TU (delayed+engine_callback)" "$tl" "$tt" "$(awk -v a="$tt" -v b="$ft" 'BEGIN { print a / b }')"
printf '%-44s %10d %9.2f %9.2f\n' "umbrella tequant/tequant.hpp" "$ul" "$ut" "$(awk -v a="$ut" -v b="$ft" 'BEGIN { print a / b }')"
