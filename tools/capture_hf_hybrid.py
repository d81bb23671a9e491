"""capture_hf.py's part for NemotronHForCausalLM, BambaForCausalLM and FalconH1ForCausalLM: parity's probe points
(`parity probes MODEL`, forward order) read off the Hugging Face model's own module tree, and the forward hooks
that record them.

    hybrid_probe_points(model, arch)      [(name, columns)] in parity's order
    HybridRecorder(model, wanted, cols, arch)
    hybrid_load(arch, checkpoint, dtype)  the model: sdpa attention and eager experts for the float64 run
    hybrid_clean_context(model, arch)     hf_generic_clean_f64 (+ NemotronH without HF's dt floor)

Names (identical to transformers 5's module names where one exists):
  NemotronH   model.embeddings; model.layers.N.mixer.{in_proj,conv1d,dt,norm} and model.layers.N.mixer (Mamba2);
              model.layers.N.mixer.{q,k,v}_proj and .mixer (attention); .mixer (MLP); .mixer.gate (router logits
              [T, E], before sigmoid and correction bias), .mixer.shared_experts, .mixer (MoE); model.layers.N;
              model.norm_f; lm_head (the logits)
  Bamba       model.embed_tokens; model.layers.N.mamba.* / .mamba or .self_attn.{q,k,v}_proj / .self_attn;
              .feed_forward; model.layers.N; model.final_layernorm; lm_head
  FalconH1    as Bamba, with both .mamba.* and .self_attn.* in every layer (mamba first); .mamba.norm only when
              mamba_rms_norm. model.embed_tokens is before embedding_multiplier, .mamba and .self_attn before
              their output multipliers, lm_head = the lm_head module's output · lm_head_multiplier (HF's logits).
              .mamba.dt and .mamba.conv1d are read off in_proj's output times the mixer's mup_vector (what the
              scan reads), as parity's points are.
"""

import contextlib

import torch

from hf_f64 import hf_generic_clean_f64

HYBRID_ARCHITECTURES = ("NemotronHForCausalLM", "BambaForCausalLM", "FalconH1ForCausalLM")


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _mixer_name(arch):
    return "mixer" if arch == "NemotronHForCausalLM" else "mamba"


def _layers(model):
    return model.model.layers


def _kind(layer, arch):
    """NemotronH: the block kind of a layer; others: None (fixed structure)."""
    if arch != "NemotronHForCausalLM":
        return None
    bt = getattr(layer, "block_type", None)
    if bt is None:
        raise RuntimeError("NemotronH layer without block_type")
    return {"linear_attention": "mamba", "full_attention": "attention"}.get(bt, bt)


def _mamba_points(b, mixer, H):
    conv = mixer.conv1d.in_channels
    pts = [(b + ".in_proj", mixer.in_proj.out_features), (b + ".conv1d", conv), (b + ".dt", mixer.num_heads)]
    # FalconH1 builds its gated norm even when `mamba_rms_norm` is false, and then never calls it
    if getattr(mixer, "norm", None) is not None and getattr(mixer, "mamba_rms_norm", True):
        pts.append((b + ".norm", mixer.out_proj.in_features))
    return pts + [(b, H)]


def _attn_points(b, a, H):
    return [(b + ".q_proj", a.q_proj.out_features), (b + ".k_proj", a.k_proj.out_features),
            (b + ".v_proj", a.v_proj.out_features), (b, H)]


def hybrid_probe_points(model, arch):
    cfg = model.config
    H = cfg.hidden_size
    embed = "model.embeddings" if arch == "NemotronHForCausalLM" else "model.embed_tokens"
    pts = [(embed, H)]
    for l, layer in enumerate(_layers(model)):
        p = f"model.layers.{l}"
        if arch == "NemotronHForCausalLM":
            k, m = _kind(layer, arch), layer.mixer
            b = p + ".mixer"
            if k == "mamba":
                pts += _mamba_points(b, m, H)
            elif k == "attention":
                pts += _attn_points(b, m, H)
            elif k == "mlp":
                pts += [(b, H)]
            elif k == "moe":
                pts += [(b + ".gate", m.gate.weight.shape[0]), (b + ".shared_experts", H), (b, H)]
            else:
                raise RuntimeError(f"layer {l}: unknown block type {k}")
        elif arch == "BambaForCausalLM":
            if getattr(layer, "mamba", None) is not None:
                pts += _mamba_points(p + ".mamba", layer.mamba, H)
            else:
                pts += _attn_points(p + ".self_attn", layer.self_attn, H)
            pts += [(p + ".feed_forward", H)]
        else:
            pts += _mamba_points(p + ".mamba", layer.mamba, H) + _attn_points(p + ".self_attn", layer.self_attn, H)
            pts += [(p + ".feed_forward", H)]
        pts.append((p, H))
    final = "model.norm_f" if arch == "NemotronHForCausalLM" else "model.final_layernorm"
    return pts + [(final, H), ("lm_head", cfg.vocab_size)]


def hybrid_load(arch, checkpoint, dtype):
    import transformers
    cls = getattr(transformers, arch)
    if dtype == "float64":
        try:
            return cls.from_pretrained(checkpoint, attn_implementation="sdpa", experts_implementation="eager").eval()
        except Exception:  # no experts_implementation in this version, or not for this model
            return cls.from_pretrained(checkpoint, attn_implementation="sdpa").eval()
    return cls.from_pretrained(checkpoint).eval()


@contextlib.contextmanager
def hybrid_clean_context(model, arch, gated_norm_groups):
    from hf_hybrid_reference import no_dt_floor, rope_theta_of
    with hf_generic_clean_f64(model, gated_norm_groups, rope_theta_of(model.config)), \
            no_dt_floor(model, arch == "NemotronHForCausalLM"):
        yield


class HybridRecorder:
    """Forward hooks keeping one [L, E] tensor per wanted probe point of the current forward."""

    def __init__(self, model, wanted, cols, arch):
        self.rows = {}
        self.handles = []
        self.wanted = set(wanted)
        mods = dict(model.named_modules())
        mixer = _mixer_name(arch)
        lm_mult = float(getattr(model.config, "lm_head_multiplier", 1.0) or 1.0) \
            if arch == "FalconH1ForCausalLM" else 1.0

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
            prefix = name[: -len("in_proj")]
            mx = mods[prefix[:-1]]

            def h(mod, args, out):
                o = _first(out)
                if name in self.wanted:
                    keep(name, o)
                scaled = o * mx.mup_vector.to(o.dtype) if getattr(mx, "mup_vector", None) is not None else o
                if prefix + "dt" in self.wanted:
                    keep(prefix + "dt", scaled[..., -mx.num_heads:])
                if prefix + "conv1d" in self.wanted:
                    conv = mx.conv1d
                    I = mx.out_proj.in_features
                    L = scaled.shape[1]
                    xbc = scaled[..., I:I + conv.in_channels].transpose(1, 2)
                    y = torch.nn.functional.conv1d(xbc, conv.weight, conv.bias, stride=conv.stride,
                                                   padding=conv.padding, dilation=conv.dilation, groups=conv.groups)
                    keep(prefix + "conv1d", y[..., :L].transpose(1, 2))
            return h

        def router_hook(name):
            def h(mod, args, out):
                E = cols[name]
                cands = [out] if torch.is_tensor(out) else [o for o in out if torch.is_tensor(o)]
                cands = [c for c in cands if c.is_floating_point() and c.shape[-1] == E]
                if not cands:
                    raise RuntimeError(f"{name}: no [tokens, {E}] router logits in the router's output")
                keep(name, cands[0].reshape(-1, E))
            return h

        def plain_hook(name):
            mult = lm_mult if name == "lm_head" else None

            def h(mod, args, out):
                t = _first(out)
                keep(name, t * mult if mult is not None and mult != 1.0 else t)
            return h

        targets = set()
        for n in self.wanted:
            for derived in (f".{mixer}.dt", f".{mixer}.conv1d"):
                if n.endswith(derived):
                    n = n[: -len(derived)] + f".{mixer}.in_proj"
            targets.add(n)
        for n in sorted(targets):
            if n not in mods or mods[n] is None:
                raise RuntimeError(f"the Hugging Face model has no module {n}")
            if n.endswith(".in_proj") and hasattr(mods[n[: -len(".in_proj")]], "conv1d"):
                self.handles.append(mods[n].register_forward_hook(in_proj_hook(n)))
            elif n.endswith(".gate") and type(mods[n]).__name__.endswith("Router"):
                self.handles.append(mods[n].register_forward_hook(router_hook(n)))
            else:
                self.handles.append(mods[n].register_forward_hook(plain_hook(n)))

    def take(self):
        r, self.rows = self.rows, {}
        return r
