#!/usr/bin/env bash
# Sets up, builds with warnings as errors, and runs every test; then builds and runs the whole
# suite again under AddressSanitizer + UndefinedBehaviorSanitizer; then runs every libFuzzer target for
# 20 s (scripts/fuzz.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/build.sh build -DPARITY_WERROR=ON -DPARITY_UNITY=ON
ctest --test-dir build --output-on-failure -j2
scripts/check-bf16-isa.sh build
scripts/build.sh build-asan -DPARITY_WERROR=ON -DPARITY_UNITY=ON -DPARITY_SANITIZE=ON -DPARITY_BUILD_BENCH=OFF -DPARITY_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j2
scripts/fuzz.sh 20
