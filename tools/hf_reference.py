#!/usr/bin/env python3
"""Build a small random-init Hugging Face checkpoint (Mamba2, or GraniteMoeHybrid) and a float64 reference.

Usage:
    python tools/hf_reference.py --preset mamba2-g1 --out tests/data/mamba2_g1
    python tools/hf_reference.py --preset mamba2-g2 --out tests/data/mamba2_g2
    python tools/hf_reference.py --preset granite-hybrid --out tests/data/granite_hybrid

Needs torch and transformers (and safetensors, which transformers brings). Everything runs on the CPU;
nothing is downloaded.

Writes into --out:
    config.json, model.safetensors   the model, saved by save_pretrained with bf16 weights
    tokens.json                      a JSON array of token ids (random stream, fixed seed)
    reference_logits.safetensors     one F32 tensor `logits` [len(tokens), vocab]: row t is the
                                     distribution after tokens[0..t]; the float64 reference, rounded to
                                     fp32 only at the very end. The file's metadata holds the comparison
                                     numbers against Hugging Face.

The reference is the tools' own float64 forward (`reference_forward`, hf_mamba2_reference.py) in the semantics
of the original mamba_ssm code, computed from the bf16 weights of the saved file widened to float64:
  * the SSM is the plain sequential recurrence  h = exp(dt*A) h + dt * x (x) B,  y = h.C + D x;
  * dt = softplus(dt_raw + dt_bias), clamped to time_step_limit (prefill and decode alike);
  * the gated RMSNorm normalises per group of intermediate/n_groups (Hugging Face normalises the whole
    intermediate width, which differs when n_groups > 1).
It is checked against Hugging Face's own forward in float64 (see `hf_comparisons`).

The granite-hybrid preset (GraniteMoeHybridForCausalLM) writes the same four files plus
    router_logits.safetensors        Hugging Face's pre-top-k router logits of every MoE layer (float64 run,
                                     fp32 casts removed, rounded to fp32) as a parity captures file, flat
                                     layout: p0/model.layers.N.block_sparse_moe.router F32 [positions, experts],
                                     p0/prompt_token_ids I64 [P], metadata layout/modules/num_prompts.
Its reference is `granite_reference_forward` (hf_granite_reference.py; equations in docs/granite-hybrid.md),
checked against HF in float64 by `granite_hf_comparisons`.

    python tools/hf_reference.py --preset granite-hybrid --out tests/data/granite_hybrid --forced-routing
adds, to a folder this preset built (its checkpoint and tokens are read, not rewritten):
    forced_router_logits.safetensors     router logits to inject (same layout as router_logits.safetensors):
                                         per layer the natural ones, experts reversed, plus noise; most tokens'
                                         top-k sets change
    forced_reference_logits.safetensors  `logits` [len(tokens), vocab]: HF float64 (fp32 casts removed) with
                                         every router's logits replaced by those, rounded to fp32; checked
                                         against the own reference under the same forcing
(hf_forced_routing.py).

This file is the command line only; the work is done, one job per file, by
    hf_mamba2_reference.py    presets mamba2-g1, mamba2-g2: checkpoint, float64 reference, HF comparisons
    hf_granite_reference.py   preset granite-hybrid: the same for GraniteMoeHybridForCausalLM
    hf_hybrid_reference.py    presets nemotron-h, nemotron-h-moe, bamba, falcon-h1, falcon-h1-norm
    hf_forced_routing.py      --forced-routing
    ref64.py                  float64 building blocks both references share (the Mamba2 mixer, norms, err)
    hf_f64.py                 running HF in float64 for real (its fp32 casts removed); capture_hf.py uses it too
    safetensors_io.py         the one byte-reproducible safetensors writer (capture_hf.py uses it too)
"""


import argparse
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network (e.g. hub kernels)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_forced_routing import forced_routing_main  # noqa: E402
from hf_granite_reference import GRANITE_PRESETS, granite_main  # noqa: E402
from hf_hybrid_reference import HYBRID_PRESETS, hybrid_main  # noqa: E402
from hf_mamba2_reference import MAMBA2_PRESETS, mamba2_main  # noqa: E402
# The metadata of the committed fixtures names these as tools/hf_reference.py's (reference_forward,
# granite_reference_forward, granite_hf_clean_f64); they stay importable from here.
from hf_f64 import granite_hf_clean_f64, hf_clean_f64  # noqa: E402,F401
from hf_granite_reference import granite_reference_forward  # noqa: E402,F401
from hf_mamba2_reference import reference_forward  # noqa: E402,F401

PRESETS = {**MAMBA2_PRESETS, **GRANITE_PRESETS, **HYBRID_PRESETS}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", required=True, choices=sorted(PRESETS))
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--seed", type=int, default=None, help="override the preset's seed")
    ap.add_argument("--tokens", type=int, default=None, help="override the preset's token count")
    ap.add_argument("--skip-hf-check", action="store_true", help="skip the comparisons against HF")
    ap.add_argument("--forced-routing", action="store_true",
                    help="granite-hybrid: add the forced-routing reference to the fixture already in --out")
    args = ap.parse_args()

    p = dict(PRESETS[args.preset])
    if args.seed is not None:
        p["seed"] = args.seed
    if args.tokens is not None:
        p["n_tokens"] = args.tokens
    if args.forced_routing:
        if p.get("arch") != "granite":
            raise SystemExit("--forced-routing needs a GraniteMoeHybrid preset")
        return forced_routing_main(args, p)
    if p.get("arch") == "granite":
        return granite_main(args, p)
    if p.get("arch") == "hybrid":
        return hybrid_main(args, p)
    return mamba2_main(args, p)


if __name__ == "__main__":
    sys.exit(main())
