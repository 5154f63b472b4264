#!/usr/bin/env bash
# Installs the Debian packages tequant's builds and tests need; installs nothing that is already there,
# so it is quick and safe to run twice. Usage: scripts/install-deps.sh [minimal|all]
set -euo pipefail
profile=${1:-all}

packages=(cmake g++ make)
if [[ $profile == all ]]; then
  packages+=(doctest-dev libbenchmark-dev libopenblas-dev libopenmpi-dev openmpi-bin libtorch-dev libgloo-dev
             clang-14 libclang-rt-14-dev gnuplot-nox python3 valgrind)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "tequant: installing ${missing[*]}" >&2
sudo=""
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "tequant: need root or sudo to install ${missing[*]}" >&2; exit 1; }
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
