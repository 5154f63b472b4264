#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Host benchmarks as docs/benchmarks.md reports them: Release builds of bench_quantize and
# bench_delayed_update, with -march=native and without (the AVX2 kernels chosen at run time), each
# run with repetitions in random interleaved order; prints medians of REAL time, each quantizer as a
# ratio to memcpy/64MiB of the same run, each delayed update per slot and as a ratio to the floor
# row of the same run, plus the CPU model, the date and the load average before and after.
#
#   scripts/bench-host.sh [build-root]        (default: build/bench)
#   BENCH_REPS=3 BENCH_MIN_TIME=0.5 BENCH_JOBS=1 BENCH_VARIANTS="native portable" scripts/bench-host.sh
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build/bench}
reps=${BENCH_REPS:-3}
min_time=${BENCH_MIN_TIME:-0.5}
jobs=${BENCH_JOBS:-1}
variants=${BENCH_VARIANTS:-native portable}

echo "cpu:    $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//') ($(nproc) cores online)"
echo "date:   $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "load:   $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) before the runs"

for v in $variants; do
  case $v in
    native) native=ON ;;
    portable) native=OFF ;;
    *) echo "bench-host.sh: unknown variant '$v' (native or portable)" >&2; exit 2 ;;
  esac
  dir=$build/$v
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DTEQUANT_BUILD_BENCHMARKS=ON -DTEQUANT_BUILD_TESTS=OFF \
    -DTEQUANT_BUILD_EXAMPLES=OFF -DTEQUANT_ENABLE_CUDA=OFF -DTEQUANT_ENABLE_MPI=OFF -DTEQUANT_ENABLE_LIBTORCH=OFF \
    -DTEQUANT_BENCH_NATIVE=$native >/dev/null
  cmake --build "$dir" -j"$jobs" --target bench_quantize bench_delayed_update >/dev/null
  for b in bench_quantize bench_delayed_update; do
    "$dir/benchmarks/$b" --benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true \
      --benchmark_min_time="$min_time" --benchmark_format=json --benchmark_out="$dir/$b.json" \
      --benchmark_out_format=json >/dev/null
  done
  python3 - "$v" "$dir/bench_quantize.json" "$dir/bench_delayed_update.json" <<'EOF'
import json, statistics, sys
from collections import defaultdict

variant, quantize_json, delayed_json = sys.argv[1:4]

def medians(path):
    """Median real time (ns) and median bytes/s of each benchmark, over its repetitions."""
    runs = json.load(open(path))["benchmarks"]
    t, bps = defaultdict(list), defaultdict(list)
    unit = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    for r in runs:
        if r.get("run_type") != "iteration":
            continue
        name = r["run_name"]
        t[name].append(r["real_time"] * unit[r["time_unit"]])
        if "bytes_per_second" in r:
            bps[name].append(r["bytes_per_second"])
    return ({k: statistics.median(v) for k, v in t.items()}, {k: statistics.median(v) for k, v in bps.items()},
            {k: len(v) for k, v in t.items()})

t, bps, n = medians(quantize_json)
mem = [k for k in bps if k.startswith("memcpy/")][0]
print(f"\n== {variant}: bench_quantize (real time, median of {n[mem]}) ==")
print(f"{'case':36} {'ms':>8} {'GB/s':>7} {'x memcpy':>9}")
for k in t:
    name = k.replace("/real_time", "")
    print(f"{name:36} {t[k] / 1e6:8.2f} {bps[k] / 1e9:7.2f} {bps[k] / bps[mem]:9.2f}")

t, _, n = medians(delayed_json)
print(f"\n== {variant}: bench_delayed_update (real time, median of {max(n.values())}; ns per slot) ==")
print(f"{'case':46} {'ns/slot':>8} {'x floor':>8}")
for k in t:
    name = k.replace("/real_time", "")
    slots = int(name.split("slots:")[1].split("/")[0])
    floor = t[name.replace(name.split("/")[1], "floor", 1) + "/real_time"] if "/floor/" not in name else t[k]
    print(f"{name:46} {t[k] / slots:8.2f} {t[k] / floor:8.2f}")
EOF
done
echo
echo "load:   $(cut -d' ' -f1-3 /proc/loadavg) (1, 5, 15 min) after the runs"
