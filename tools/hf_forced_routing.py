"""Forced routing (hf_reference.py --preset granite-hybrid --forced-routing): Hugging Face's
GraniteMoeHybridForCausalLM run in float64 with every MoE router's logits replaced by given values.

    forced_routing_main(args, p)  adds forced_router_logits.safetensors and forced_reference_logits.safetensors
                                  to a folder the granite-hybrid preset built (its checkpoint and tokens.json are
                                  read, never rewritten)
    granite_forced_routers        the logits to inject: per layer the reference's natural ones with the expert
                                  axis reversed plus noise, the first seed with a clear top-k gap
    RouterForce                   the injection into an HF model (forward hook or wrapped forward)

Needs torch and transformers; computes on the CPU and downloads nothing.
"""

import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network (e.g. hub kernels)

import torch  # noqa: E402

from hf_f64 import granite_hf_clean_f64  # noqa: E402
from hf_granite_reference import (RouterTap, granite_head_dim, granite_load, granite_reference_forward,  # noqa: E402
                                  granite_rope_theta, topk_sets)
from ref64 import err  # noqa: E402
from safetensors_io import load_tensors, write_logits, write_safetensors  # noqa: E402


def _layer_of(name):
    return int(name.split(".")[2])


def granite_forced_routers(natural, k, seed, min_gap):
    """Router logits to inject, per layer: the natural ones with the expert axis reversed plus Gaussian noise of
    half their spread, rounded to fp32 (the injected values are these fp32 numbers, for HF and parity alike).
    The first seed whose every row has a top-k gap >= min_gap is taken, so no routing hangs on a near-tie."""
    names = sorted(natural, key=_layer_of)
    for attempt in range(20):
        gen = torch.Generator().manual_seed(seed + attempt)
        forced = {}
        gap = float("inf")
        for n in names:
            nat = natural[n].to(torch.float64)
            noise = torch.randn(nat.shape, generator=gen, dtype=torch.float64)
            f = (nat.flip(-1) + 0.5 * float(nat.std()) * noise).to(torch.float32)
            top = f.to(torch.float64).sort(-1, descending=True).values
            gap = min(gap, float((top[:, k - 1] - top[:, k]).min()))
            forced[n] = f
        if gap >= min_gap:
            return forced, seed + attempt, gap
    raise RuntimeError("no forced routing with a clear top-k gap in 20 tries")


class RouterForce:
    """Makes every MoE router of an HF GraniteMoeHybrid model produce given logits [T, E] in place of its linear
    map; the rest of the router (top-k, softmax over the k) and of the model is HF's own. Covers a router with a
    `layer` nn.Linear (older transformers) and one holding `weight` itself (F.linear inside its forward)."""

    def __init__(self, model, forced):
        self.hits = {}
        self.handles = []
        self.patched = []
        self.sources = {}
        for name, mod in model.named_modules():
            if not name.endswith("block_sparse_moe.router"):
                continue
            if name not in forced:
                raise RuntimeError(f"no forced logits for {name}")
            self.hits[name] = 0
            val = forced[name]
            lin = getattr(mod, "layer", None)
            if isinstance(lin, torch.nn.Linear):
                self.handles.append(lin.register_forward_hook(self._replace_output(name, val)))
            else:
                self._wrap_forward(name, mod, val)
            try:
                import inspect
                self.sources[name] = inspect.getsource(type(mod))[:3000]
            except Exception as e:  # for the report only
                self.sources[name] = f"{type(e).__name__}: {e}"
        if sorted(self.hits) != sorted(forced):
            raise RuntimeError(f"routers {sorted(self.hits)} vs forced {sorted(forced)}")

    def _replace_output(self, name, val):
        def hook(mod, inp, out):
            self.hits[name] += 1
            return val.to(out.dtype).reshape(out.shape)
        return hook

    def _wrap_forward(self, name, mod, val):
        w = mod.weight
        orig = mod.forward

        def fwd(*a, **kw):
            real = torch.nn.functional.linear

            def linear(x, weight, bias=None):
                if weight.data_ptr() == w.data_ptr() and tuple(weight.shape) == tuple(w.shape):
                    self.hits[name] += 1
                    return val.to(x.dtype).reshape(*x.shape[:-1], val.shape[-1])
                return real(x, weight, bias)

            torch.nn.functional.linear = linear
            try:
                return orig(*a, **kw)
            finally:
                torch.nn.functional.linear = real

        mod.forward = fwd
        self.patched.append(mod)

    def close(self):
        for h in self.handles:
            h.remove()
        for m in self.patched:
            del m.forward


def forced_routing_main(args, p):
    """Adds the forced-routing reference to a fixture folder this preset built (checkpoint and tokens.json are
    read, never rewritten)."""
    import transformers
    d = args.out
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(d, "tokens.json")) as f:
        tokens = json.load(f)
    W = {k: v.to(torch.float64) for k, v in load_tensors(os.path.join(d, "model.safetensors")).items()}
    k = cfg["num_experts_per_tok"]
    ref64, natural = granite_reference_forward(W, cfg, tokens)
    forced, noise_seed, gap = granite_forced_routers(natural, k, p["seed"] + 100, p["min_topk_gap"])
    own_forced, _ = granite_reference_forward(W, cfg, tokens, forced_routers=forced)

    ids = torch.tensor([tokens], dtype=torch.long)
    theta = granite_rope_theta(cfg)
    dim = granite_head_dim(cfg)
    res = {}
    with torch.no_grad():
        model = granite_load(d, attn_implementation="sdpa").double().eval()
        with granite_hf_clean_f64(model, cfg["mamba_n_groups"], theta, dim):
            hf_natural = model(ids, use_cache=False).logits[0]
            force = RouterForce(model, forced)  # first: a tap on the same module then sees the injected values
            tap = RouterTap(model)
            try:
                hf_forced = model(ids, use_cache=False).logits[0]
                seen = dict(tap.out)
            finally:
                force.close()
                tap.close()
            hf_after = model(ids, use_cache=False).logits[0]
        del model
    if any(h != 1 for h in force.hits.values()):
        raise RuntimeError(f"router injection hits {force.hits} (expected 1 per router); router sources: "
                           + json.dumps(force.sources))
    res["hf_natural_vs_own_natural"] = err(hf_natural, ref64)
    res["hf_forced_vs_own_forced"] = err(hf_forced, own_forced)
    res["hf_forced_vs_own_natural"] = err(hf_forced, ref64)
    res["hf_after_release_vs_own_natural"] = err(hf_after, ref64)
    res["router_logits_seen_by_hf_vs_injected"] = {
        n: err(seen[n], forced[n]) for n in sorted(seen, key=_layer_of)} if seen else "no router output tapped"
    changed = {n: sum(a != b for a, b in zip(topk_sets(forced[n].to(torch.float64), k),
                                              topk_sets(natural[n], k)))
               for n in sorted(forced, key=_layer_of)}
    res["tokens_with_changed_topk_set"] = changed
    if res["hf_forced_vs_own_forced"]["rel_fro"] > 1e-12 or res["hf_after_release_vs_own_natural"]["rel_fro"] > 1e-12:
        raise RuntimeError("HF under forced routing does not match the own reference: " + json.dumps(res))

    names = sorted(forced, key=_layer_of)
    rt = {"p0/prompt_token_ids": torch.tensor(tokens, dtype=torch.int64)}
    for n in names:
        rt["p0/" + n] = forced[n]
    rmeta = {"layout": "flat", "modules": ",".join(names), "num_prompts": "1",
             "source": "forced routing (tools/hf_reference.py --forced-routing): per layer the float64 reference's "
                       "natural router logits with the expert axis reversed, plus N(0, (0.5 std)^2) noise, "
                       "rounded to fp32; these are the exact values injected into HF",
             "noise_seed": str(noise_seed), "min_topk_gap": f"{gap:.4g}",
             "tokens_with_changed_topk_set": json.dumps(changed),
             "transformers_version": transformers.__version__}
    write_safetensors(os.path.join(d, "forced_router_logits.safetensors"), sorted(rt.items()), rmeta)
    meta = {"reference": "Hugging Face GraniteMoeHybridForCausalLM, float64 with its fp32 casts removed "
                         "(granite_hf_clean_f64), sdpa, full-sequence forward without cache, every router's logits "
                         "replaced by forced_router_logits.safetensors (widened to float64); rounded to fp32",
            "rows": str(len(tokens)), "transformers_version": transformers.__version__,
            "torch_version": torch.__version__}
    for name, r in res.items():
        meta["vs_" + name] = json.dumps(r)
    how = write_logits(os.path.join(d, "forced_reference_logits.safetensors"), hf_forced.to(torch.float32), meta)
    print(json.dumps({"out": d, "logits_writer": how, "results": res, "noise_seed": noise_seed, "min_topk_gap": gap,
                      "injection_hits": force.hits, "router_source": next(iter(force.sources.values()))},
                     indent=1))
    return 0
