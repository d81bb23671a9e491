#!/usr/bin/env bash
# The CUDA objects' clean compile time: every src/kernels_cuda/*.cu of a configured build, compiled with its
# own command from compile_commands.json (nvcc itself: no ccache, no make) into a scratch folder, JOBS at a
# time. Prints each file's wall, user and sys seconds (GNU time; user + sys include nvcc's cicc and ptxas) and
# the sums. CPU seconds are the steadier figure on a loaded machine.
#   scripts/cuda-compile-time.sh BUILD_DIR [JOBS]   (BUILD_DIR configured with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR [JOBS]}" && pwd)
jobs=${2:-2}
[ -f "$build/compile_commands.json" ] || { echo "no $build/compile_commands.json (configure with -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# One line per object: the directory to run in, then the command with its output sent to the scratch folder.
python3 - "$build/compile_commands.json" "$out" > "$out/commands" <<'EOF'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    f = e["file"]
    if "/src/kernels_cuda/" in f and f.endswith(".cu"):
        args = shlex.split(e["command"])
        args[args.index("-o") + 1] = sys.argv[2] + "/" + f.rsplit("/", 1)[1] + ".o"
        print(e["directory"], f.rsplit("/", 1)[1], shlex.join(args), sep="\t")
EOF
start=$(date +%s)
while IFS=$'\t' read -r dir name cmd; do
  printf '%s\t%s\t%s\0' "$dir" "$name" "$cmd"
done < "$out/commands" | xargs -0 -P "$jobs" -I{} bash -c '
  IFS=$'"'"'\t'"'"' read -r dir name cmd <<< "$1"
  cd "$dir" && /usr/bin/time -f "$name %e %U %S" -a -o "$2/times" bash -c "$cmd" > /dev/null 2>&1' _ {} "$out"
wall=$(( $(date +%s) - start ))
sort "$out/times" | awk -v wall="$wall" '
  { printf "%-24s %7.1f s wall %7.1f s user %6.1f s sys\n", $1, $2, $3, $4; u += $3; s += $4; n++ }
  END { printf "%d objects: %.1f s user + %.1f s sys = %.1f s CPU; %d s wall\n", n, u, s, u + s, wall }'
