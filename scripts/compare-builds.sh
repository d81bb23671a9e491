#!/usr/bin/env bash
# scripts/compare-builds.sh OLD_PARITY NEW_PARITY [DEVICE] — a refactor of the model or backend code
# promises the same bits: run both `parity` binaries (two builds, e.g. main's and a branch's) on the same
# requests and compare every output file byte for byte. Covers single-shot prefill (`score`, exact and
# plain, bf16 and fp32 on a GPU), decode steps (`generate --dump-logits`: CUDA graphs and eager),
# every probe point (`capture`, including the final norm and lm_head), tensor parallelism (TP = 2), the
# Mamba2 and the hybrid models. DEVICE is cuda (default) or cpu. Prints one line per case; exits 1 if any
# output differs or a run fails.
set -uo pipefail
cd "$(dirname "$0")/.."
old=$1 new=$2 device=${3:-cuda}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
fail=0 n=0
# case NAME ARGS...: ARGS hold @OUT@ where the output file goes; without it the printed JSON is compared
# (generate's logprobs are printed to the last bit).
case_() {
  local name=$1; shift
  local a=() b=()
  for x in "$@"; do a+=("${x//@OUT@/$out/a}"); b+=("${x//@OUT@/$out/b}"); done
  n=$((n + 1))
  rm -f "$out/a" "$out/b"
  if ! "$old" "${a[@]}" >"$out/a.json" 2>"$out/a.log"; then echo "FAIL (old run) $name"; tail -3 "$out/a.log"; fail=1; return; fi
  if ! "$new" "${b[@]}" >"$out/b.json" 2>"$out/b.log"; then echo "FAIL (new run) $name"; tail -3 "$out/b.log"; fail=1; return; fi
  local fa="$out/a" fb="$out/b"
  [[ "$*" == *@OUT@* ]] || fa="$out/a.json" fb="$out/b.json"
  if cmp -s "$fa" "$fb"; then echo "same  $name"; else echo "DIFF  $name: $(cmp "$fa" "$fb" | head -1)"; fail=1; fi
}
mode_of() { [ -n "$1" ] && echo exact || echo plain; }
dtypes=(bfloat16)
[ "$device" = cuda ] && dtypes=(bfloat16 float32)
prompt=$(seq -s, 1 37) forced=$(seq -s, 40 52)
for m in tests/data/mamba2_g1 tests/data/granite_hybrid; do  # the committed fixtures: single-shot prefill
  for ex in --exact ""; do
    case_ "score $m $(mode_of "$ex")" score "$m" --device "$device" $ex --tokens "$(seq -s, 1 40)" --out @OUT@
  done
done
for m in builtin:tiny builtin:tiny-hybrid; do
  for dt in "${dtypes[@]}"; do
    d=(--device "$device")
    [ "$device" = cuda ] && d+=(--dtype "$dt")
    for ex in --exact ""; do
      mode=$(mode_of "$ex")
      case_ "score $m $dt $mode" score "$m" "${d[@]}" $ex --tokens "$prompt,$forced" --out @OUT@
      case_ "generate $m $dt $mode" generate "$m" "${d[@]}" $ex --prompt "$prompt" --forced "$forced" \
        --dump-logits @OUT@
      [ "$dt" = float32 ] && continue  # the dtype changes the GEMMs' weights, not the schedule: covered above
      # three requests decoding side by side (a padded graph bucket), the first one's logprobs printed
      case_ "generate $m $dt $mode batch 3" generate "$m" "${d[@]}" $ex --prompt "$prompt" --max-tokens 12 \
        --logprobs 4 --add-prompt 5,6,7 --add-prompt 9,8
      case_ "generate $m $dt $mode eager" generate "$m" "${d[@]}" $ex --enforce-eager --prompt "$prompt" \
        --forced "$forced" --dump-logits @OUT@
    done
    case_ "capture $m $dt exact" capture "$m" "${d[@]}" --exact --prompt "$prompt" --forced "$forced" \
      --modules 're:.*' --out @OUT@
  done
done
for m in builtin:tiny-g2 builtin:tiny-hybrid-g2; do
  for ex in --exact ""; do
    case_ "score $m tp2 $(mode_of "$ex")" score "$m" --device "$device" --tensor-parallel-size 2 $ex \
      --tokens "$prompt,$forced" --out @OUT@
  done
  case_ "capture $m tp2 exact" capture "$m" --device "$device" --tensor-parallel-size 2 --exact --prompt "$prompt" \
    --forced "$forced" --modules 're:.*' --out @OUT@
done
echo "$n cases, $([ $fail = 0 ] && echo 'all the same bits' || echo 'SOME DIFFER OR FAILED')"
exit $fail
