#!/usr/bin/env python3
"""Capture named intermediate tensors from a Hugging Face Mamba2ForCausalLM or GraniteMoeHybridForCausalLM
(chosen by `architectures` in the checkpoint's config.json; NemotronH, Bamba and FalconH1 too, see
capture_hf_hybrid.py; any other exits with an error naming it), under
parity's names and in parity's captures-file format, so that `parity compare` can put parity's own capture
beside it, or tensor replacement can inject it (e.g. HF's router logits).

Usage:
    python tools/capture_hf.py CHECKPOINT --prompt T [--prompt T ...] [--forced T ... | --max-tokens N]
                               --modules PATTERN ... --out F [--dtype float64|float32] [--hf-gated-norm]
                               [--logits-out F]

    T: a JSON file holding an array of token ids, or an inline list "1,2,3". With several prompts give one
       --forced shared by all, or one per prompt.
    PATTERN: as `parity capture --modules`: an exact name, a layer range (backbone.layers.0-3.mixer), or
       re:REGEX (Python `re.fullmatch`; keep to the syntax ECMAScript shares, as parity uses std::regex).

Needs only torch, transformers and safetensors (the last to read the file back). Files are written by
safetensors_io.py, the tools' one byte-reproducible writer. Computes on the CPU and
downloads nothing.

Each prompt is one full-sequence forward without cache over the tokens parity's engine would feed:
  * --forced K tokens: prompt + all K (the engine feeds the last forced token too);
  * --max-tokens N: greedy generation first (each step a full re-forward, as seed 000 describes HF), then one
    forward over prompt + the first N-1 generated tokens (the N-th is chosen, never fed);
  * neither: the prompt only.
Row t of every tensor is position t. The output is the flat layout: p{i}/{module} F32 [positions, E],
p{i}/prompt_token_ids and p{i}/continuation_token_ids I64, metadata layout/modules/num_prompts plus where
it came from. `lm_head` is the logits [positions, vocab]; --logits-out also writes them as a logits file
(one F32 tensor `logits`, the format of `parity score`) for one prompt, for logit validation.

How Hugging Face's modules map to parity's probe points (`parity probes MODEL`):
  backbone.embeddings             embeddings output
  backbone.layers.N.mixer.in_proj in_proj output [z | xBC | dt]
  backbone.layers.N.mixer.conv1d  conv1d output: HF's Conv1d pads k-1 on both sides and returns
                                  [B, C, L+k-1]; the first L columns, transposed to [L, C], are the causal
                                  conv (+ bias) BEFORE SiLU (HF applies act afterwards), as parity's point.
                                  transformers >= 5 never calls the module (causal_conv1d_fn takes its
                                  weights), so it is applied here to the xBC columns of in_proj's output
  backbone.layers.N.mixer.dt      raw dt: the last num_heads columns of the in_proj output (before dt_bias,
                                  softplus and the time_step_limit clamp); HF has no module for it
  backbone.layers.N.mixer.norm    gated RMSNorm output
  backbone.layers.N.mixer         mixer output (after out_proj)
  backbone.layers.N               block output (residual stream after the layer)
  backbone.norm_f, lm_head        final norm output, logits

GraniteMoeHybridForCausalLM (names as `parity probes`, identical to HF's module names where one exists):
  model.embed_tokens              Embedding output, before embedding_multiplier
  model.layers.N.mamba.in_proj, .mamba.conv1d, .mamba.dt, .mamba.norm   as backbone.layers.N.mixer.* above
  model.layers.N.mamba            mamba mixer output (out_proj), before residual_multiplier
  model.layers.N.self_attn.{q,k,v}_proj   projections, before RoPE
  model.layers.N.self_attn        attention output (o_proj), before residual_multiplier
  model.layers.N.block_sparse_moe.router  router logits [positions, experts], pre-top-k: the router's `layer`
                                  Linear output (older transformers) or, in transformers 5, the router_logits
                                  element of the router's (top_k_index, top_k_weights, router_logits) output;
                                  checked against the router's linear map of its input
  model.layers.N.block_sparse_moe, .shared_mlp   MoE output (top-k experts combined), shared MLP output
  model.layers.N                  layer output (residual stream)
  model.norm                      final RMSNorm output
  lm_head                         the lm_head module's output divided by logits_scaling (= HF's logits)
The float64 run uses sdpa attention and the eager MoE, with granite_hf_clean_f64 of tools/hf_f64.py
(fp32 casts removed, float64 RMSNorms and RoPE angles, gated norm per group unless --hf-gated-norm).

--dtype float64 (the default) widens the weights exactly and removes HF's internal fp32 casts (the
`.float()` calls on the SSD inputs and A_log, the fp32 RMSNorms, residual_in_fp32), with the patches of
tools/hf_f64.py, so the result is a float64 reference rounded to fp32 only when written. Its gated
RMSNorm is made per group of intermediate/n_groups (mamba_ssm's and parity's semantics); --hf-gated-norm
keeps HF's whole-width norm (differs only when n_groups > 1). --dtype float32 runs HF as shipped.
"""

import argparse
import json
import os
import re
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network (e.g. hub kernels)

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_f64 import granite_hf_clean_f64, hf_clean_f64  # noqa: E402
from hf_granite_reference import (granite_head_dim, granite_layer_kinds, granite_load,  # noqa: E402
                                  granite_mamba_dims, granite_rope_theta)
from safetensors_io import write_logits, write_safetensors  # noqa: E402
from capture_hf_hybrid import (HYBRID_ARCHITECTURES, HybridRecorder, hybrid_clean_context,  # noqa: E402
                               hybrid_load, hybrid_probe_points)

SUPPORTED_ARCHITECTURES = ("Mamba2ForCausalLM", "GraniteMoeHybridForCausalLM") + HYBRID_ARCHITECTURES


def checkpoint_architecture(checkpoint):
    """(architecture, config dict) from the checkpoint's config.json `architectures`; exits naming it and the
    supported ones when it is none of them."""
    path = os.path.join(checkpoint, "config.json")
    try:
        with open(path) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: cannot read {path}: {e}")
    archs = cfg.get("architectures") or []
    if isinstance(archs, str):
        archs = [archs]
    for a in archs:
        if a in SUPPORTED_ARCHITECTURES:
            return a, cfg
    raise SystemExit(f"error: {path}: architecture {', '.join(map(str, archs)) if archs else '(none given)'} "
                     f"is not supported; supported: {', '.join(SUPPORTED_ARCHITECTURES)}")


# ----------------------------------------------------------------------------------------------------------
# Names and patterns (parity's probe points, in forward order)
# ----------------------------------------------------------------------------------------------------------

def probe_points(cfg):
    H, L = cfg.hidden_size, cfg.num_hidden_layers
    I = int(cfg.expand * H)
    conv = I + 2 * cfg.n_groups * cfg.state_size
    nh = cfg.num_heads
    pts = [("backbone.embeddings", H)]
    for l in range(L):
        b = f"backbone.layers.{l}"
        pts += [(b + ".mixer.in_proj", I + conv + nh), (b + ".mixer.conv1d", conv), (b + ".mixer.dt", nh),
                (b + ".mixer.norm", I), (b + ".mixer", H), (b, H)]
    pts += [("backbone.norm_f", H), ("lm_head", cfg.vocab_size)]
    return pts


def granite_probe_points(cfg):
    """GraniteMoeHybrid probe points in parity's order (`parity probes`); cfg: the config.json dict."""
    H, L = cfg["hidden_size"], cfg["num_hidden_layers"]
    kinds = granite_layer_kinds(cfg)
    E = cfg.get("num_local_experts", 0) or 0
    pts = [("model.embed_tokens", H)]
    for l in range(L):
        b = f"model.layers.{l}"
        if kinds[l] == "mamba":
            I, nh, P, N, G, K = granite_mamba_dims(cfg)
            conv = I + 2 * G * N
            pts += [(b + ".mamba.in_proj", I + conv + nh), (b + ".mamba.conv1d", conv), (b + ".mamba.dt", nh),
                    (b + ".mamba.norm", I), (b + ".mamba", H)]
        else:
            d = granite_head_dim(cfg)
            nq, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
            pts += [(b + ".self_attn.q_proj", nq * d), (b + ".self_attn.k_proj", nkv * d),
                    (b + ".self_attn.v_proj", nkv * d), (b + ".self_attn", H)]
        if E > 0:
            pts += [(b + ".block_sparse_moe.router", E), (b + ".block_sparse_moe", H)]
        pts += [(b + ".shared_mlp", H), (b, H)]
    pts += [("model.norm", H), ("lm_head", cfg["vocab_size"])]
    return pts


def expand_patterns(patterns, names):
    def some():
        s = ", ".join(names[:8])
        return s + (f", ... ({len(names)} in all)" if len(names) > 8 else "")

    known = set(names)
    chosen = set()
    for p in patterns:
        matched = False
        if p.startswith("re:"):
            try:
                rx = re.compile(p[3:])
            except re.error as e:
                raise SystemExit(f"error: module pattern '{p}' is not a valid regular expression: {e}")
            for n in names:
                if rx.fullmatch(n):
                    chosen.add(n)
                    matched = True
        else:
            alts = [[]]
            for part in p.split("."):
                m = re.fullmatch(r"(\d+)-(\d+)", part)
                if m:
                    lo, hi = int(m.group(1)), int(m.group(2))
                    if lo > hi:
                        raise SystemExit(f"error: module pattern '{p}': range {part} is empty")
                    opts = [str(i) for i in range(lo, hi + 1)]
                else:
                    opts = [part]
                alts = [a + [o] for a in alts for o in opts]
            expanded = [".".join(a) for a in alts]
            for n in expanded:
                if n not in known:
                    if len(expanded) > 1:
                        raise SystemExit(f"error: module pattern '{p}' names {n}, which is not a probe point; "
                                         f"valid names: {some()}")
                    break
                chosen.add(n)
                matched = True
        if not matched:
            raise SystemExit(f"error: module pattern '{p}' matches no probe point; valid names: {some()} "
                             "(a regular expression needs the prefix re:)")
    return [n for n in names if n in chosen]


def read_tokens(spec):
    if os.path.exists(spec):
        with open(spec) as f:
            ids = json.load(f)
    else:
        try:
            ids = [int(x) for x in spec.split(",")]
        except ValueError:
            raise SystemExit(f"error: '{spec}' is neither a file nor a list like 1,2,3")
    if not ids or not all(isinstance(x, int) and x >= 0 for x in ids):
        raise SystemExit(f"error: '{spec}': token ids must be a non-empty list of non-negative integers")
    return ids


# ----------------------------------------------------------------------------------------------------------
# Capture
# ----------------------------------------------------------------------------------------------------------

def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _conv_of(mods, prefix, zxbcdt):
    """The conv1d module's output over the xBC columns of in_proj, before SiLU. transformers >= 5 does not
    call the module (it passes its weights to causal_conv1d_fn or that function's PyTorch reference), so its
    forward hook never fires: the same depthwise conv is applied here with the module's own weights, padding
    and groups, and the first L steps are kept. prefix: the mixer's module name with a trailing dot."""
    conv = mods[prefix + "conv1d"]
    I = mods[prefix + "out_proj"].in_features
    L = zxbcdt.shape[1]
    xbc = zxbcdt[..., I:I + conv.in_channels].transpose(1, 2)
    y = torch.nn.functional.conv1d(xbc, conv.weight, conv.bias, stride=conv.stride,
                                   padding=conv.padding, dilation=conv.dilation, groups=conv.groups)
    return y[..., :L].transpose(1, 2)


def _hook_targets(wanted, mixer):
    """The modules to hook for the wanted points: HF has no module for `<layer>.<mixer>.dt` and
    `<layer>.<mixer>.conv1d`, so those are read off `<layer>.<mixer>.in_proj`'s output instead."""
    targets = set(wanted)
    for n in wanted:
        for derived in (f".{mixer}.dt", f".{mixer}.conv1d"):
            if n.endswith(derived):
                targets.discard(n)
                targets.add(n[: -len(derived)] + f".{mixer}.in_proj")
    return targets


def _in_proj_hook(mods, name, wanted, keep, num_heads):
    """The hook on a Mamba mixer's in_proj: its output, and the dt and conv1d points read off it."""
    prefix = name[: -len("in_proj")]

    def h(mod, args, out):
        o = _first(out)
        if name in wanted:
            keep(name, o)
        if prefix + "dt" in wanted:
            keep(prefix + "dt", o[..., -num_heads:])
        if prefix + "conv1d" in wanted:
            keep(prefix + "conv1d", _conv_of(mods, prefix, o))
    return h


class Recorder:
    """Forward hooks that keep one [L, E] float tensor per probe point for the current forward."""

    def __init__(self, model, wanted, cfg):
        self.rows = {}
        self.handles = []
        self.wanted = set(wanted)
        nh = cfg.num_heads
        mods = dict(model.named_modules())

        def keep(name, t):
            if name in self.rows:
                raise RuntimeError(f"{name} was computed twice in one forward")
            if t.dim() != 3 or t.shape[0] != 1:
                raise RuntimeError(f"{name}: unexpected output shape {tuple(t.shape)}")
            self.rows[name] = t[0].detach().clone()

        def hook_for(name):
            if name.endswith(".mixer.in_proj"):
                return _in_proj_hook(mods, name, self.wanted, keep, nh)

            def h(mod, args, out):
                keep(name, _first(out))
            return h

        for n in sorted(_hook_targets(wanted, "mixer")):
            if n not in mods:
                raise RuntimeError(f"the Hugging Face model has no module {n}")
            self.handles.append(mods[n].register_forward_hook(hook_for(n)))

    def take(self):
        r, self.rows = self.rows, {}
        return r


class GraniteRecorder:
    """Forward hooks on an HF GraniteMoeHybridForCausalLM keeping one [L, E] tensor per probe point.
      model.embed_tokens                 the Embedding module's output (before embedding_multiplier)
      model.layers.N.mamba.in_proj       in_proj output [z | xBC | dt]
      model.layers.N.mamba.conv1d        derived from in_proj's output as for Mamba2 (causal conv, before SiLU)
      model.layers.N.mamba.dt            the last mamba_n_heads columns of in_proj's output
      model.layers.N.mamba.norm          gated RMSNorm output
      model.layers.N.mamba / .self_attn  mixer output (out_proj / o_proj), before residual_multiplier
      model.layers.N.self_attn.{q,k,v}_proj  the projections (before RoPE)
      model.layers.N.block_sparse_moe.router  pre-top-k router logits [tokens, E]: the output of the router's
                                         `layer` Linear (older transformers), else the [tokens, E] tensor of
                                         the router's output that equals its linear map of its input (checked)
      model.layers.N.block_sparse_moe    MoE output; .shared_mlp shared MLP output; model.layers.N layer output
      model.norm                         final RMSNorm output
      lm_head                            the lm_head module's output divided by logits_scaling (as HF's logits)"""

    def __init__(self, model, wanted, cols, logits_scaling):
        self.rows = {}
        self.handles = []
        self.wanted = set(wanted)
        mods = dict(model.named_modules())

        def keep(name, t):
            if name in self.rows:
                raise RuntimeError(f"{name} was computed twice in one forward")
            E = cols[name]
            if t.dim() == 3 and t.shape[0] == 1 and t.shape[-1] == E:
                t = t[0]
            elif not (t.dim() == 2 and t.shape[-1] == E):
                raise RuntimeError(f"{name}: unexpected output shape {tuple(t.shape)}")
            self.rows[name] = t.detach().clone()

        def in_proj_hook(name):
            return _in_proj_hook(mods, name, self.wanted, keep, cols[name[: -len("in_proj")] + "dt"])

        def router_hooks(name, mod):
            E = cols[name]
            lin = getattr(mod, "layer", None)
            if isinstance(lin, torch.nn.Linear):
                def h(m, args, out):
                    keep(name, _first(out).reshape(-1, E))
                return [lin.register_forward_hook(h)]
            w = getattr(mod, "weight", None)
            if not isinstance(w, torch.Tensor) or w.dim() != 2 or w.shape[0] != E:
                raise RuntimeError(f"{name}: router {type(mod).__name__} has neither a `layer` Linear nor a "
                                   f"[{E}, hidden] weight; cannot tell its logits")

            def h(m, args, kwargs, out):
                x = args[0] if args else next(iter(kwargs.values()))
                ref = torch.nn.functional.linear(x.reshape(-1, w.shape[1]).to(w.dtype), w)
                cands = [out] if torch.is_tensor(out) else [o for o in out if torch.is_tensor(o)]
                cands = [c.reshape(-1, E) for c in cands
                         if c.is_floating_point() and c.shape[-1] == E and c.numel() == ref.numel()]
                errs = [float((c.to(ref.dtype) - ref).abs().max()) for c in cands]
                scale = max(1.0, float(ref.abs().max()))
                if not cands or min(errs) > 1e-5 * scale:
                    raise RuntimeError(f"{name}: no [tokens, {E}] tensor in the router's output equals its "
                                       f"linear map (max |diff| {errs}); cannot tell its logits")
                keep(name, cands[errs.index(min(errs))])
            return [mod.register_forward_hook(h, with_kwargs=True)]

        def plain_hook(name):
            div = logits_scaling if name == "lm_head" else None

            def h(mod, args, out):
                t = _first(out)
                keep(name, t / div if div is not None else t)
            return h

        for n in sorted(_hook_targets(wanted, "mamba")):
            if n not in mods or mods[n] is None:
                raise RuntimeError(f"the Hugging Face model has no module {n}")
            if n.endswith(".mamba.in_proj"):
                self.handles.append(mods[n].register_forward_hook(in_proj_hook(n)))
            elif n.endswith(".block_sparse_moe.router"):
                self.handles += router_hooks(n, mods[n])
            else:
                self.handles.append(mods[n].register_forward_hook(plain_hook(n)))

    def take(self):
        r, self.rows = self.rows, {}
        return r


def run(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="Hugging Face checkpoint folder ("
                    + " or ".join(SUPPORTED_ARCHITECTURES) + ", from config.json's architectures)")
    ap.add_argument("--prompt", action="append", required=True, help="prompt tokens (repeat for several)")
    ap.add_argument("--forced", action="append", default=[], help="forced continuation: one shared or one per prompt")
    ap.add_argument("--max-tokens", type=int, default=0, help="greedy continuation length")
    ap.add_argument("--modules", nargs="+", required=True, help="probe point patterns")
    ap.add_argument("--out", required=True, help="captures file to write")
    ap.add_argument("--dtype", choices=["float64", "float32"], default="float64")
    ap.add_argument("--hf-gated-norm", action="store_true", help="keep HF's whole-width gated norm in float64")
    ap.add_argument("--logits-out", help="also write lm_head as a logits file (one prompt only)")
    args = ap.parse_args()
    assert sys.byteorder == "little"
    arch, cfg_json = checkpoint_architecture(args.checkpoint)
    granite = arch == "GraniteMoeHybridForCausalLM"

    import transformers

    if args.forced and args.max_tokens:
        raise SystemExit("error: --forced and --max-tokens exclude each other")
    prompts = [read_tokens(p) for p in args.prompt]
    forced = [read_tokens(f) for f in args.forced]
    if len(forced) > 1 and len(forced) != len(prompts):
        raise SystemExit(f"error: {len(forced)} --forced for {len(prompts)} --prompt (one shared or one per prompt)")
    if args.logits_out and len(prompts) != 1:
        raise SystemExit("error: --logits-out writes one prompt's logits; give one --prompt")

    hybrid = arch in HYBRID_ARCHITECTURES
    if hybrid:
        model = hybrid_load(arch, args.checkpoint, args.dtype)
    elif granite:
        from transformers import GraniteMoeHybridForCausalLM
        if args.dtype == "float64":  # as hf_granite_reference.py: sdpa, eager (per-expert loop) MoE
            model = granite_load(args.checkpoint, attn_implementation="sdpa").eval()
        else:
            model = GraniteMoeHybridForCausalLM.from_pretrained(args.checkpoint).eval()
        points = granite_probe_points(cfg_json)
    else:
        from transformers import Mamba2ForCausalLM
        model = Mamba2ForCausalLM.from_pretrained(args.checkpoint).eval()
    model = model.to(torch.float64 if args.dtype == "float64" else torch.float32)
    cfg = model.config
    if hybrid:
        points = hybrid_probe_points(model, arch)
    elif not granite:
        points = probe_points(cfg)
    names = [n for n, _ in points]
    cols = dict(points)
    modules = expand_patterns(args.modules, names)
    for p in prompts + forced:
        bad = [t for t in p if t >= cfg.vocab_size]
        if bad:
            raise SystemExit(f"error: token id {bad[0]} is outside the vocabulary [0, {cfg.vocab_size})")

    import contextlib
    if args.dtype == "float32":
        ctx = contextlib.nullcontext()
    elif hybrid:
        groups = 1 if args.hf_gated_norm else int(cfg_json.get("n_groups", cfg_json.get("mamba_n_groups", 1)) or 1)
        ctx = hybrid_clean_context(model, arch, groups)
    elif granite:
        rope = cfg_json.get("position_embedding_type") == "rope"
        ctx = granite_hf_clean_f64(model, 1 if args.hf_gated_norm else cfg_json["mamba_n_groups"],
                                   granite_rope_theta(cfg_json) if rope else None, granite_head_dim(cfg_json))
    else:
        ctx = hf_clean_f64(model, 1 if args.hf_gated_norm else cfg.n_groups)
    if hybrid:
        rec = HybridRecorder(model, modules, cols, arch)
    else:
        rec = (GraniteRecorder(model, modules, cols, float(cfg_json["logits_scaling"])) if granite
               else Recorder(model, modules, cfg))
    tensors = []
    logits0 = None
    with ctx:
        for i, prompt in enumerate(prompts):
            cont = forced[0 if len(forced) == 1 else i] if forced else []
            fed = prompt + cont
            if args.max_tokens:
                seq = list(prompt)
                for _ in range(args.max_tokens):
                    seq.append(int(torch.argmax(run(model, seq)[-1])))
                    rec.take()
                cont = seq[len(prompt):]
                fed = seq[:-1]
            logits = run(model, fed)
            got = rec.take()
            if granite and "lm_head" in got and not torch.allclose(got["lm_head"], logits, rtol=1e-6, atol=0):
                raise RuntimeError("lm_head / logits_scaling differs from the model's logits")
            if i == 0:
                logits0 = logits
            tensors.append((f"p{i}/prompt_token_ids", torch.tensor(prompt, dtype=torch.int64)))
            if cont:
                tensors.append((f"p{i}/continuation_token_ids", torch.tensor(cont, dtype=torch.int64)))
            for m in modules:
                t = got.get(m)
                if t is None:
                    raise RuntimeError(f"{m} was not computed by the forward (hook never fired)")
                if tuple(t.shape) != (len(fed), cols[m]):
                    raise RuntimeError(f"{m}: captured shape {tuple(t.shape)}, expected {(len(fed), cols[m])}")
                tensors.append((f"p{i}/{m}", t.to(torch.float32)))

    # outside the clean context: inside it, the hybrids' `.to(float32)` of a float64 tensor is a no-op
    tensors = [(n, t.to(torch.float32) if t.is_floating_point() else t) for n, t in tensors]
    meta = {
        "layout": "flat",
        "modules": ",".join(modules),
        "num_prompts": str(len(prompts)),
        "source": "huggingface",
        "model": os.path.normpath(args.checkpoint),
        "dtype": args.dtype + ("-clean" if args.dtype == "float64" else "-as-shipped"),
        "gated_norm": "whole-width" if (args.hf_gated_norm or args.dtype == "float32") else "per-group",
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__.split("+")[0],
    }
    write_safetensors(args.out, tensors, meta)  # and reads it back (names, metadata, every tensor)
    if args.logits_out:
        write_logits(args.logits_out, logits0.to(torch.float32),
                     {"model": meta["model"], "command": "capture_hf.py", "first_position": "0", "dtype": meta["dtype"]})
    print(json.dumps({"out": args.out, "modules": modules, "num_prompts": len(prompts), "dtype": meta["dtype"],
                      "bytes": os.path.getsize(args.out)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
