#!/usr/bin/env python3
"""The reference Mamba2 Triton kernels (mamba_ssm's, which vLLM's are adapted from) at the shapes of
bench/cuda/cuda_bench.cpp's BM_CudaSsdPrefill and BM_CudaDecodeSsm, so that issue 11's "faster than
vLLM's kernels" ratios are measured in the same device run as parity's, not taken from anchors.

Nothing of mamba_ssm is committed: fetch state-spaces/mamba yourself and point --mamba-ssm at a folder
holding its `mamba_ssm/ops/triton/*.py` and `mamba_ssm/utils/{determinism,torch}.py` (with an empty
`mamba_ssm/__init__.py`: the package's own imports its CUDA extensions). Needs torch and triton; if
einops is missing a small stand-in (rearrange / repeat on the patterns those files use) takes its place.

    python3 bench/cuda/mamba_ssm_reference.py --mamba-ssm DIR

Shapes: 32 heads x 64, state 128, one group, bf16 x / B / C / dt, fp32 A, D, dt_bias; chunk 256 for the
scan (mamba_chunk_scan_combined, the prefill vLLM runs), fp32 or bf16 state for the decode update
(selective_state_update, heads tied as vLLM calls it), replayed from a CUDA graph. One line per case.
"""
import argparse
import os
import re
import sys
import types

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cublas_reference import timed  # noqa: E402  (back-to-back launches between two events)


def _einops_standin():
    """rearrange / repeat for patterns of named axes, parenthesised groups, '1' and '...'."""

    def parse(side):
        groups = []
        for tok in re.findall(r"\([^)]*\)|\.\.\.|\w+", side):
            groups.append(tok[1:-1].split() if tok.startswith("(") else [tok])
        return groups

    def apply(t, pattern, sizes, allow_new):
        left, right = (parse(s) for s in pattern.split("->"))
        sizes = dict(sizes)
        nell = t.dim() - (len(left) - (1 if ["..."] in left else 0))
        elems, shape, ell_shape, dim = [], [], [], 0
        for g in left:
            if g == ["..."]:
                elems.append("...")
                ell_shape = list(t.shape[dim:dim + nell])
                shape.extend(ell_shape)
                dim += nell
                continue
            total = t.shape[dim]
            dim += 1
            known = 1
            unknown = [a for a in g if a != "1" and a not in sizes]
            for a in g:
                if a != "1" and a in sizes:
                    known *= sizes[a]
            if unknown:
                sizes[unknown[0]] = total // known
            for a in g:
                if a != "1":
                    elems.append(a)
                    shape.append(sizes[a])
        flat = []
        for e in elems:
            flat.extend([f"...{i}" for i in range(nell)] if e == "..." else [e])
        t = t.reshape(shape)
        out_elems = []
        for g in right:
            for a in g:
                if a == "...":
                    out_elems.extend(f"...{i}" for i in range(nell))
                elif a != "1":
                    out_elems.append(a)
        present = [e for e in out_elems if e in flat]
        t = t.permute([flat.index(e) for e in present])
        if allow_new:
            for i, e in enumerate(out_elems):
                if e not in flat:
                    t = t.unsqueeze(i)
            t = t.expand([sizes[e] if e not in flat else -1 for e in out_elems])
        final = []
        for g in right:
            if g == ["..."]:
                final.extend(ell_shape)
                continue
            n = 1
            for a in g:
                n *= 1 if a == "1" else sizes[a]
            final.append(n)
        return t.reshape(final)

    mod = types.ModuleType("einops")
    mod.rearrange = lambda t, pattern, /, **k: apply(t, pattern, k, False)
    mod.repeat = lambda t, pattern, /, **k: apply(t, pattern, k, True).contiguous()
    return mod


def graph_us(fn, reps=200):
    """Microseconds per call, fn captured once in a CUDA graph and the graph replayed (as vLLM decodes)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(10):
        g.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        g.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / reps * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mamba-ssm", required=True, help="folder holding mamba_ssm/ops/triton (see the docstring)")
    args = ap.parse_args()
    try:
        import einops  # noqa: F401
    except ImportError:
        sys.modules["einops"] = _einops_standin()
    sys.path.insert(0, args.mamba_ssm)
    from mamba_ssm.ops.triton.selective_state_update import selective_state_update
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

    torch.manual_seed(0)
    dev, h, p, n = "cuda", 32, 64, 128
    A = -torch.rand(h, device=dev) * 4 - 0.5
    D = torch.rand(h, device=dev)
    dt_bias = torch.rand(h, device=dev) - 2
    for batch in (1, 8, 32):
        L = 2048
        x = (torch.randn(batch, L, h, p, device=dev) * 0.5).bfloat16()
        dt = (torch.randn(batch, L, h, device=dev) * 0.5).bfloat16()
        B = (torch.randn(batch, L, 1, n, device=dev) * 0.3).bfloat16()
        C = (torch.randn(batch, L, 1, n, device=dev) * 0.3).bfloat16()
        run = lambda: mamba_chunk_scan_combined(x, dt, A, B, C, 256, D=D, dt_bias=dt_bias, dt_softplus=True,
                                                return_final_states=True)
        run()  # autotune outside the timing
        # Launched from Python the five kernels of a one-sequence call are bound by the host's launch
        # cost; replayed from a graph (as parity's BM_CudaSsdPrefill is device-bound) they are not.
        print(f"mamba_ssm_chunk_scan batch={batch} L={L} chunk=256: launched {timed(run, reps=20):.1f} us, "
              f"graph {graph_us(run, reps=50):.1f} us", flush=True)
    for state_dtype in (torch.float32, torch.bfloat16):
        for batch in (1, 8, 64, 256):
            state = (torch.randn(batch, h, p, n, device=dev) * 0.1).to(state_dtype)
            x = (torch.randn(batch, h, p, device=dev) * 0.5).bfloat16()
            dt = (torch.randn(batch, h, device=dev) * 0.5).bfloat16()
            B = (torch.randn(batch, 1, n, device=dev) * 0.3).bfloat16()
            C = (torch.randn(batch, 1, n, device=dev) * 0.3).bfloat16()
            # Heads tied as vLLM passes them: one dt, A, D and dt_bias a head, stride 0 over p and n.
            dt_t = dt[:, :, None].expand(-1, -1, p)
            A_t = A[:, None, None].expand(-1, p, n)
            D_t = D[:, None].expand(-1, p)
            bias_t = dt_bias[:, None].expand(-1, p)
            step = lambda: selective_state_update(state, x, dt_t, A_t, B, C, D=D_t, dt_bias=bias_t, dt_softplus=True)
            name = "fp32" if state_dtype == torch.float32 else "bf16"
            print(f"mamba_ssm_state_update batch={batch} state={name}: {graph_us(step):.1f} us", flush=True)


if __name__ == "__main__":
    main()
