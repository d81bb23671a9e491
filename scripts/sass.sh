#!/usr/bin/env bash
# The SASS of one CUDA source as the build compiles it, for reading a kernel's hot loop without a GPU: its
# command from compile_commands.json, with -cubin instead of -c, then a disassembler. The device machine has
# cuobjdump; this machine has none (nvcc 13 only), so the script fetches Debian's nvidia-cuda-toolkit 11.8
# package once (non-free, ~84 MB, into ~/.cache/parity) and uses its cuobjdump. 11.8 predates the ELF flags
# nvcc 13 writes, so a copy of the cubin gets the old sm_90 flags; the instructions are read as they are
# (the few 11.8 does not know print as a blank line).
#   scripts/sass.sh BUILD_DIR SOURCE.cu [--stats]
# Without --stats: the SASS, one instruction a line ("address instruction"). --stats: per noinline function
# (a CALL target) and for the kernel, the count of instructions, local-memory loads and stores (LDL/STL),
# generic and global loads, and integer divisions (the I2F.RP + MUFU.RCP pair nvcc emits for one).
set -euo pipefail
build=$(cd "${1:?usage: $0 BUILD_DIR SOURCE.cu [--stats]}" && pwd)
src=$(realpath "${2:?usage: $0 BUILD_DIR SOURCE.cu [--stats]}")
mode=${3:-}
cache=${PARITY_SASS_CACHE:-$HOME/.cache/parity/cuda-11.8}
dump=$(command -v cuobjdump || true)
if [ -z "$dump" ]; then
  dump=$cache/usr/bin/cuobjdump
  if [ ! -x "$dump" ]; then
    mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial"
    cat > "$cache/apt/nonfree.sources" <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    apt_opts=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$cache/apt" -o "Dir::State::Lists=$cache/apt/lists"
              -o "Dir::Cache=$cache/apt/cache")
    apt-get "${apt_opts[@]}" update > /dev/null 2>&1 || { echo "sass.sh: apt-get update failed (network?)" >&2; exit 2; }
    (cd "$cache/apt" && apt-get "${apt_opts[@]}" download nvidia-cuda-toolkit > /dev/null 2>&1)
    dpkg -x "$cache"/apt/nvidia-cuda-toolkit_*.deb "$cache"
    [ -x "$dump" ] || { echo "sass.sh: no cuobjdump in Debian's nvidia-cuda-toolkit" >&2; exit 2; }
  fi
fi
[ -f "$build/compile_commands.json" ] || { echo "sass.sh: no $build/compile_commands.json" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cmd=$(python3 - "$build/compile_commands.json" "$src" "$out/k.cubin" <<'EOF'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"] == sys.argv[2]:
        a = shlex.split(e["command"])
        a[a.index("-o") + 1] = sys.argv[3]
        a[a.index("-c")] = "-cubin"
        # One GPU code instance (the build also embeds PTX): -cubin takes one.
        a = [x for x in a if not x.startswith(("--generate-code", "-gencode"))] + ["-arch=sm_90a"]
        print(e["directory"] + "\t" + shlex.join(a))
        break
else:
    sys.exit("sass.sh: %s is not in compile_commands.json" % sys.argv[2])
EOF
)
(cd "${cmd%%$'\t'*}" && eval "${cmd#*$'\t'}")
if [ "$dump" = "$cache/usr/bin/cuobjdump" ]; then
  # ELF ABI version 7 and the pre-12 flags for sm_90 (SM 0x5a, virtual SM 0x5a, 64-bit addresses).
  python3 -c "
import struct, sys
d = bytearray(open(sys.argv[1], 'rb').read()); d[8] = 7; struct.pack_into('<I', d, 0x30, 0x5a055a)
open(sys.argv[1], 'wb').write(d)" "$out/k.cubin"
fi
"$dump" -sass "$out/k.cubin" > "$out/k.raw"
# One instruction a line, "address instruction", each kernel under a "kernel NAME" line.
sed -nE 's#^\s+Function : (.*)$#kernel \1#p; /^\s+\/\*[0-9a-f]{4,}\*\//{s#^\s+/\*([0-9a-f]+)\*/\s+#\1 #; s#\s*/\* 0x[0-9a-f]+ \*/\s*$##; s#\s*;$##; p}' \
  "$out/k.raw" > "$out/k.s"
if [ "$mode" != "--stats" ]; then cat "$out/k.s"; exit 0; fi
python3 - "$out/k.s" <<'EOF'
import re, sys
kernels, cur = [], None
for line in open(sys.argv[1]):
    a, _, t = line.rstrip("\n").partition(" ")
    if a == "kernel":
        cur = (t, [])
        kernels.append(cur)
    elif cur is not None and t:
        cur[1].append((int(a, 16), t.strip()))
print("%6s %5s %5s %7s %5s %5s  %s" % ("instr", "LDL", "STL", "LD/LDG", "IDIV", "HMMA", "kernel (then its noinline functions)"))
for name, ins in kernels:
    starts = sorted({0} | {int(m.group(1), 16) for _, t in ins for m in [re.search(r"CALL\.REL\.NOINC (0x[0-9a-f]+)", t)] if m})
    for i, s in enumerate(starts):
        e = starts[i + 1] if i + 1 < len(starts) else 1 << 62
        body = [t for a, t in ins if s <= a < e]
        op = lambda p: sum(1 for t in body if re.match(r"(@!?U?P\w+ )?" + p, t))
        print("%6d %5d %5d %7d %5d %5d  %s" % (len(body), op(r"LDL"), op(r"STL"), op(r"LD(G)?\.E"), op(r"I2F\.RP"),
              op(r"HMMA"), name[:100] if s == 0 else "  fn@0x%x" % s))
EOF
