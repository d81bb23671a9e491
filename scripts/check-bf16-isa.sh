#!/usr/bin/env bash
# AVX512-BF16 instructions may appear only where kernels::avx512_bf16_active() guards them: in
# ssd_avx512.cpp's and ssu_avx512.cpp's kHw = true instantiations and the entry points that choose
# them. The two files are compiled with -mavx512bf16 (CMakeLists.txt), so this checks that the
# compiler put the instructions nowhere else (a CPU with AVX-512 but without BF16 would stop there
# with SIGILL).
#   scripts/check-bf16-isa.sh [build-dir]
set -euo pipefail
total=0
for name in ssd_avx512 ssu_avx512; do
  obj=$(find "${1:-build}" -path "*src/kernels/$name.cpp.o" | head -1)
  [[ -n "$obj" ]] || { echo "$name.cpp.o not found under ${1:-build}" >&2; exit 2; }
  fns=$(objdump -d --no-show-raw-insn -C "$obj" |
    awk '/^[0-9a-f]+ <.*>:$/ {fn = $0} /\t(vcvtne2ps2bf16|vcvtneps2bf16|vdpbf16ps)/ {print fn}' | sort -u)
  [[ -n "$fns" ]] || { echo "no AVX512-BF16 instruction in $obj: was it built with -mavx512bf16?" >&2; exit 1; }
  bad=$(grep -v -e '<true,' -e ', true,' -e 'fold_bf16_avx512(' -e 'row_and_fold_bf16_avx512(' -e 'round_bf16_avx512(' \
        -e 'ssu_head_bf16_avx512(' -e '<true>(' <<<"$fns" || true)
  if [[ -n "$bad" ]]; then
    echo "AVX512-BF16 instructions outside the guarded paths in $obj:" >&2
    echo "$bad" >&2
    exit 1
  fi
  total=$((total + $(wc -l <<<"$fns")))
done
echo "AVX512-BF16 instructions in $total functions, all on guarded paths"
