#!/usr/bin/env bash
# Installs the Debian packages tequant's builds and tests need; installs nothing that is already there,
# so it is quick and safe to run twice. Usage: scripts/install-deps.sh [minimal|example|all]
#   minimal: a C++ build; example: the main example (the GPT: OpenBLAS for its GEMMs, gnuplot for its
#   plot); all: everything the test suite builds.
set -euo pipefail
profile=${1:-all}

case $profile in
  minimal | example | all) ;;
  *) echo "tequant: unknown profile '$profile' (expected minimal, example or all)" >&2; exit 2 ;;
esac

packages=(cmake g++ make)
if [[ $profile == example ]]; then
  packages+=(libopenblas-dev gnuplot-nox)
fi
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
