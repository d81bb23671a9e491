#!/usr/bin/env bash
# Installs the Debian packages parity builds with. Safe to run twice: apt-get skips what is there.
# The server tests (tests/server) also use Node.js + npm when present; without them they report "not run".
set -euo pipefail
PKGS=(build-essential cmake pkg-config nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
      libxxhash-dev libgtest-dev libgmock-dev libbenchmark-dev python3 ccache
      libpcre2-dev libicu-dev pybind11-dev python3-dev python3-pybind11 python3-numpy python3-pytest
      clang libclang-rt-14-dev libomp-14-dev nginx-light curl)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
