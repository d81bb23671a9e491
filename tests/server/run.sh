#!/usr/bin/env bash
# tests/server/run.sh BUILD_DIR PARITY_BINARY TEST.mjs — runs one server test under Node.js.
# Installs the pinned npm packages (package.json here) into BUILD_DIR/server-tests, not the repo.
# Exit 77 ("not run" in ctest) when Node.js or the npm packages cannot be had.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
build="$1" parity="$2" test="$3"
if ! command -v node >/dev/null; then
  echo "NOT RUN: Node.js is not installed (scripts/setup.sh installs it)"
  exit 77
fi
work="$build/server-tests"
mkdir -p "$work"
cp "$here/package.json" "$work/"
(
  flock 9  # tests run in parallel: one install
  if [ ! -d "$work/node_modules/openai" ]; then
    (cd "$work" && timeout 120 npm install --no-audit --no-fund --loglevel=error >npm.log 2>&1) || exit 77
  fi
) 9>"$work/.install.lock"
if [ ! -d "$work/node_modules/openai" ]; then
  echo "NOT RUN: npm could not install the pinned openai package:"
  tail -5 "$work/npm.log" 2>/dev/null
  exit 77
fi
# Each test gets its own copy of the scripts; Node finds node_modules in the parent folder.
dir="$work/${test%.mjs}"
mkdir -p "$dir"
cp "$here"/*.mjs "$here"/*.in "$dir/"
cd "$dir" && PARITY_BIN="$parity" exec node "$test"
