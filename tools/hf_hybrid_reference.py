"""More hybrid families for hf_reference.py (the command line): NemotronHForCausalLM (Nemotron-H, and Nemotron 3's
MoE layers), BambaForCausalLM and FalconH1ForCausalLM. Presets nemotron-h, nemotron-h-moe, bamba, falcon-h1,
falcon-h1-norm.

    hybrid_main(args, p)     builds the checkpoint (random init, bf16, save_pretrained), tokens.json,
                             reference_logits.safetensors (and, for MoE presets, router_logits.safetensors,
                             forced_router_logits.safetensors, forced_reference_logits.safetensors) in args.out

The reference is Hugging Face's own model run in float64 for real ("clean"): `model.double()` plus every fp32
cast removed for the run (hf_f64.hf_generic_clean_f64: `.float()`, `.to(torch.float32)` and `.type(torch.float32)`
of float64 tensors are no-ops, RoPE's cos/sin come from float64 angles, gated norms per group of
intermediate/n_groups), sdpa attention, eager experts, one full-sequence forward without cache; rounded to fp32
at the end. A forward hook on every module reports any floating output that is not float64 during that run
(`fp32_leaks`, which must be empty). The comparisons against HF as shipped (fp32, float64 without the clean-up),
eager attention and HF's cached token-by-token decode go into the metadata and the printed report.

Everything is written so that one unattended run either finishes or says clearly what failed: the config is
built from keyword sets tried in turn (transformers' spellings changed across versions), and the model it gives
is checked (hidden size, layer kinds, parameter count) before anything is written.

Needs torch and transformers; computes on the CPU and downloads nothing.
"""

import contextlib
import inspect
import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network (e.g. hub kernels)

import torch  # noqa: E402

from hf_f64 import hf_generic_clean_f64  # noqa: E402
from ref64 import err  # noqa: E402
from safetensors_io import read_safetensors_header, write_logits, write_safetensors  # noqa: E402

# Multipliers are dyadic (exact in fp32 and bf16) so that no reader depends on where they are rounded.
HYBRID_PRESETS = {
    # Nemotron-H (dense): Mamba2 (8 heads x 16, n_groups 2, state 16), attention without RoPE (GQA 4:2, head_dim 16),
    # ReLU^2 MLP; every layer is one block behind one RMSNorm.
    "nemotron-h": dict(
        arch="hybrid", family="nemotron_h", cls="NemotronHForCausalLM", cfg_cls="NemotronHConfig",
        pattern="M-M*-M", vocab_size=256, hidden_size=64,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
        mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, mamba_n_groups=2, mamba_d_conv=4,
        mamba_chunk_size=32, mamba_expand=2, layer_norm_epsilon=1e-5,
        embed_std=1.0, n_tokens=100, seed=3579,
    ),
    # Nemotron 3 style: Mamba2, MoE ("E": sigmoid router + e_score_correction_bias, top-2 of 8, norm_topk_prob,
    # routed_scaling_factor 2.5, one shared ReLU^2 expert), attention and one dense MLP.
    "nemotron-h-moe": dict(
        arch="hybrid", family="nemotron_h", cls="NemotronHForCausalLM", cfg_cls="NemotronHConfig",
        pattern="ME*M-E", vocab_size=256, hidden_size=64,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96,
        mamba_num_heads=8, mamba_head_dim=16, ssm_state_size=16, mamba_n_groups=2, mamba_d_conv=4,
        mamba_chunk_size=32, mamba_expand=2, layer_norm_epsilon=1e-5,
        n_routed_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        moe_shared_expert_intermediate_size=48, n_shared_experts=1, routed_scaling_factor=2.5,
        norm_topk_prob=True, n_group=1, topk_group=1, correction_bias_std=0.05,
        embed_std=1.0, n_tokens=100, seed=4680, min_topk_gap=1e-4,
    ),
    # Bamba: Mamba2 layers (4 heads x 32, n_groups 1) and attention layers 1 and 3 (RoPE on half of head_dim, GQA),
    # every layer followed by a SwiGLU feed_forward.
    "bamba": dict(
        arch="hybrid", family="bamba", cls="BambaForCausalLM", cfg_cls="BambaConfig",
        vocab_size=256, hidden_size=64, num_hidden_layers=4, attn_layer_indices=[1, 3],
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
        mamba_n_heads=4, mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=4,
        mamba_chunk_size=32, mamba_expand=2, rms_norm_eps=1e-5,
        embed_std=1.0, n_tokens=100, seed=5791,
    ),
    # Falcon-H1: attention and Mamba2 side by side in every layer, mamba_d_ssm (96) != expand*hidden, µP
    # multipliers everywhere, no gated norm (mamba_rms_norm false: y * silu(z)), as the released models.
    "falcon-h1": dict(
        arch="hybrid", family="falcon_h1", cls="FalconH1ForCausalLM", cfg_cls="FalconH1Config",
        vocab_size=256, hidden_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
        mamba_d_ssm=96, mamba_n_heads=6, mamba_d_head=16, mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=4,
        mamba_chunk_size=32, mamba_expand=2, mamba_rms_norm=False, mamba_norm_before_gate=False,
        rms_norm_eps=1e-5, rope_theta=10000.0,
        embedding_multiplier=2.0, lm_head_multiplier=0.5, mlp_multipliers=[0.5, 2.0], key_multiplier=0.5,
        attention_in_multiplier=1.5, attention_out_multiplier=0.75, ssm_multipliers=[0.5, 1.25, 0.75, 1.5, 0.625],
        ssm_in_multiplier=1.25, ssm_out_multiplier=0.5,
        embed_std=1.0, n_tokens=100, seed=6802,
    ),
    # Falcon-H1 with the gated RMSNorm on (per group, n_groups 2, norm before gate).
    "falcon-h1-norm": dict(
        arch="hybrid", family="falcon_h1", cls="FalconH1ForCausalLM", cfg_cls="FalconH1Config",
        vocab_size=256, hidden_size=64, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=96,
        mamba_d_ssm=96, mamba_n_heads=6, mamba_d_head=16, mamba_d_state=16, mamba_n_groups=2, mamba_d_conv=4,
        mamba_chunk_size=32, mamba_expand=2, mamba_rms_norm=True, mamba_norm_before_gate=True,
        rms_norm_eps=1e-5, rope_theta=10000.0,
        embedding_multiplier=2.0, lm_head_multiplier=0.5, mlp_multipliers=[0.5, 2.0], key_multiplier=0.5,
        attention_in_multiplier=1.5, attention_out_multiplier=0.75, ssm_multipliers=[0.5, 1.25, 0.75, 1.5, 0.625],
        ssm_in_multiplier=1.25, ssm_out_multiplier=0.5,
        embed_std=1.0, n_tokens=100, seed=7913,
    ),
}

MAX_PARAMS = 3_000_000  # a wrong keyword silently leaves a default (hidden 4096, vocab 131072): refuse that


def _transformers_class(name):
    import transformers
    c = getattr(transformers, name, None)
    if c is None:
        raise SystemExit(f"transformers {transformers.__version__} has no {name}")
    return c


def _rope_kw(params, theta, extra=None):
    """RoPE keywords in the spelling this transformers takes (rope_parameters in 5.x, rope_theta before)."""
    if theta is None:
        return [{}]
    rp = {"rope_type": "default", "rope_theta": theta}
    rp.update(extra or {})
    out = []
    if "rope_parameters" in params:
        out.append({"rope_parameters": rp})
    out.append({"rope_theta": theta, **(extra or {})})
    out.append({})
    return out


def _config_candidates(p):
    """Keyword sets to try, best first."""
    cfg_cls = _transformers_class(p["cfg_cls"])
    params = inspect.signature(cfg_cls.__init__).parameters
    common = dict(vocab_size=p["vocab_size"], hidden_size=p["hidden_size"], tie_word_embeddings=False,
                  num_attention_heads=p["num_attention_heads"], num_key_value_heads=p["num_key_value_heads"],
                  intermediate_size=p["intermediate_size"], max_position_embeddings=4096, initializer_range=0.02,
                  attention_dropout=0.0, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    fam = p["family"]
    cands = []
    if fam == "nemotron_h":
        kw = dict(common, head_dim=p["head_dim"], mlp_hidden_act="relu2", mamba_num_heads=p["mamba_num_heads"],
                  mamba_head_dim=p["mamba_head_dim"], ssm_state_size=p["ssm_state_size"],
                  mamba_n_groups=p["mamba_n_groups"], mamba_d_conv=p["mamba_d_conv"],
                  mamba_chunk_size=p["mamba_chunk_size"], mamba_expand=p["mamba_expand"],
                  layer_norm_epsilon=p["layer_norm_epsilon"], mamba_conv_bias=True, mamba_proj_bias=False,
                  use_bias=False, mlp_bias=False, attention_bias=False, residual_in_fp32=False,
                  use_mamba_kernels=False)
        if "n_routed_experts" in p:
            for k in ("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size",
                      "moe_shared_expert_intermediate_size", "n_shared_experts", "routed_scaling_factor",
                      "norm_topk_prob", "n_group", "topk_group"):
                kw[k] = p[k]
            kw["moe_latent_size"] = None
        pat = p["pattern"]
        names_a = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
        names_b = {"M": "linear_attention", "*": "full_attention", "-": "mlp", "E": "moe"}
        cands.append(dict(kw, hybrid_override_pattern=pat, num_hidden_layers=len(pat)))
        cands.append(dict(kw, layers_block_type=[names_b[c] for c in pat]))
        cands.append(dict(kw, layers_block_type=[names_a[c] for c in pat]))
        cands.append(dict(kw, hybrid_override_pattern=pat))
    elif fam == "bamba":
        kw = dict(common, num_hidden_layers=p["num_hidden_layers"], attn_layer_indices=list(p["attn_layer_indices"]),
                  mamba_n_heads=p["mamba_n_heads"], mamba_d_head=p["mamba_d_head"], mamba_d_state=p["mamba_d_state"],
                  mamba_n_groups=p["mamba_n_groups"], mamba_d_conv=p["mamba_d_conv"],
                  mamba_chunk_size=p["mamba_chunk_size"], mamba_expand=p["mamba_expand"], rms_norm_eps=p["rms_norm_eps"],
                  mamba_conv_bias=True, mamba_proj_bias=False, hidden_act="silu")
        cands.append(kw)
        lt = ["attention" if i in p["attn_layer_indices"] else "mamba" for i in range(p["num_hidden_layers"])]
        cands.append(dict(kw, layers_block_type=lt))
    elif fam == "falcon_h1":
        kw = dict(common, num_hidden_layers=p["num_hidden_layers"], hidden_act="silu", rms_norm_eps=p["rms_norm_eps"],
                  projectors_bias=False, attention_bias=False, mlp_bias=False)
        for k in ("mamba_d_ssm", "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
                  "mamba_chunk_size", "mamba_expand", "mamba_rms_norm", "mamba_norm_before_gate",
                  "embedding_multiplier", "lm_head_multiplier", "mlp_multipliers", "key_multiplier",
                  "attention_in_multiplier", "attention_out_multiplier", "ssm_multipliers", "ssm_in_multiplier",
                  "ssm_out_multiplier"):
            kw[k] = p[k]
        kw.update(mamba_conv_bias=True, mamba_proj_bias=False)
        for rk in _rope_kw(params, p["rope_theta"]):
            cands.append(dict(kw, **rk))
    else:
        raise SystemExit(f"unknown family {fam}")
    if fam == "bamba":
        # Bamba fixes rope_theta 10000 and partial_rotary_factor 0.5 in older versions; leave RoPE at its defaults.
        pass
    return cfg_cls, cands


def _layer_kinds_of(model):
    """Per decoder layer, the set of block kinds it holds (from module class names)."""
    kinds = []
    layers = None
    for name, mod in model.named_modules():
        if name.endswith(".layers") and isinstance(mod, torch.nn.ModuleList):
            layers = mod
            break
    if layers is None:
        raise RuntimeError("no .layers ModuleList in the model")
    for layer in layers:
        k = set()
        for _, sub in layer.named_modules():
            cn = type(sub).__name__
            if cn.endswith("Mixer") and "Mamba" in cn or cn.endswith("Mamba2Mixer") or cn == "BambaMixer" \
                    or cn == "FalconH1Mixer":
                k.add("mamba")
            elif cn.endswith("Attention"):
                k.add("attention")
            elif cn.endswith("MoE"):
                k.add("moe")
            elif cn.endswith("MLP") and "moe" not in k:
                k.add("mlp")
        kinds.append(sorted(k))
    return kinds


def _expected_kinds(p):
    fam = p["family"]
    if fam == "nemotron_h":
        m = {"M": ["mamba"], "*": ["attention"], "-": ["mlp"], "E": ["moe"]}  # (the MoE's shared MLP is not counted)
        return [m[c] for c in p["pattern"]]
    if fam == "bamba":
        return [sorted({"attention" if i in p["attn_layer_indices"] else "mamba", "mlp"})
                for i in range(p["num_hidden_layers"])]
    return [["attention", "mamba", "mlp"]] * p["num_hidden_layers"]


def build_model(p):
    """The first keyword set whose model has the preset's shape (sizes, parameter count and per-layer block kinds
    read from module class names); failing that, the first with the right sizes, with a warning (class names may
    change across versions). Returns (config, model, kwargs used, tries)."""
    cfg_cls, cands = _config_candidates(p)
    model_cls = _transformers_class(p["cls"])
    tries = []
    want = _expected_kinds(p)
    fallback = None
    for kw in cands:
        try:
            config = cfg_cls(**kw)
            if config.hidden_size != p["hidden_size"] or config.vocab_size != p["vocab_size"]:
                raise RuntimeError(f"hidden {config.hidden_size} vocab {config.vocab_size}")
            torch.manual_seed(p["seed"])
            model = model_cls(config).eval()
            n = sum(x.numel() for x in model.parameters())
            if n > MAX_PARAMS:
                raise RuntimeError(f"{n} parameters: a keyword was ignored")
            got = _layer_kinds_of(model)
            if got != want:
                if fallback is None:
                    fallback = (config, model, kw)
                raise RuntimeError(f"layer kinds {got}, want {want}")
            tries.append({"keys": sorted(kw), "result": "ok"})
            return config, model, kw, tries
        except Exception as e:  # a spelling this version does not take: try the next
            tries.append({"keys": sorted(kw), "result": f"{type(e).__name__}: {e}"[:400]})
    if fallback is not None:
        print("WARNING: layer kinds not recognised from class names; using the first model with the right sizes",
              file=sys.stderr)
        tries.append({"result": "fallback: first candidate with the right sizes"})
        return fallback + (tries,)
    raise SystemExit("no config keyword set gave the preset's model:\n" + json.dumps(tries, indent=1))


def hybrid_init(model, p, gen):
    """Every parameter from a fixed generator, by name: realistic Mamba2 A, dt_bias and D, norm weights around 1,
    projections N(0, 1/fan_in), a non-zero router correction bias; rounded to bf16."""

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    def uniform(shape, lo, hi):
        return torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo

    new = {}
    for name, prm in model.named_parameters():
        shp = tuple(prm.shape)
        leaf = name.rsplit(".", 1)[-1]
        if name.endswith("embed_tokens.weight") or name.endswith("embeddings.weight"):
            v = normal(shp, p["embed_std"])
        elif name == "lm_head.weight":
            v = normal(shp, 1.0 / math.sqrt(shp[-1]))
        elif leaf == "A_log":  # A = -exp(A_log) uniform in [-16, -1]
            v = torch.log(uniform(shp, 1.0, 16.0))
        elif leaf == "dt_bias":  # softplus(dt_bias) log-uniform in [1e-3, 1e-1]
            dt = torch.exp(uniform(shp, math.log(1e-3), math.log(1e-1))).clamp(min=1e-4)
            v = dt + torch.log(-torch.expm1(-dt))
        elif leaf == "D":
            v = normal(shp, 0.05, 1.0)
        elif leaf == "e_score_correction_bias":
            v = normal(shp, p.get("correction_bias_std", 0.05))
        elif ("norm" in name.lower()) and leaf == "weight":
            v = normal(shp, 0.1, 1.0)
        elif "conv1d" in name and leaf == "weight":
            v = uniform(shp, -0.5, 0.5)
        elif "conv1d" in name and leaf == "bias":
            v = normal(shp, 0.1)
        elif leaf == "bias":
            v = normal(shp, 0.05)
        elif len(shp) in (2, 3):  # Linear weights [out, in], expert stacks [E, out, in]
            v = normal(shp, 1.0 / math.sqrt(shp[-1]))
        else:
            raise RuntimeError(f"no init rule for parameter {name} {shp}")
        new[name] = v
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in new.items():
            params[k].copy_(v.to(torch.bfloat16).to(params[k].dtype))
    return model


def load_hf(p, model_dir, **kw):
    """from_pretrained with eager (per-expert loop) experts when the version has the option."""
    cls = _transformers_class(p["cls"])
    try:
        return cls.from_pretrained(model_dir, experts_implementation="eager", **kw)
    except Exception:  # no such option in this version, or not for this model: HF's default
        return cls.from_pretrained(model_dir, **kw)


def rope_theta_of(config):
    rp = getattr(config, "rope_parameters", None)
    if isinstance(rp, dict) and rp.get("rope_theta") is not None:
        return float(rp["rope_theta"])
    v = getattr(config, "rope_theta", None)
    return None if v is None else float(v)


class RouterTap:
    """Forward hooks keeping the router logits [T, E] (the router's own output, before sigmoid/softmax and
    top-k) of every MoE layer of the latest forward, keyed by HF module name."""

    def __init__(self, model, E):
        self.out = {}
        self.handles = []
        for name, mod in model.named_modules():
            if type(mod).__name__.endswith("TopkRouter") or type(mod).__name__.endswith("Router"):
                self.handles.append(mod.register_forward_hook(self._keep(name, E)))

    def _keep(self, name, E):
        def hook(mod, inp, out):
            cands = [out] if torch.is_tensor(out) else [o for o in out if torch.is_tensor(o)]
            cands = [c for c in cands if c.is_floating_point() and c.shape[-1] == E]
            if not cands:
                raise RuntimeError(f"{name}: no [T, {E}] router logits in the module output")
            self.out[name] = cands[0].detach().reshape(-1, E).clone()
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


class RouterForce:
    """Every router's logits [T, E] are the given ones; the rest (sigmoid, correction bias, grouped top-k,
    scaling) is HF's own. A router whose forward returns only its logits (older transformers) is replaced
    outright; one that also returns its top-k (transformers 5's DeepseekV3-style TopkRouter, which NemotronH
    inherits) keeps its forward, and its one linear map over the expert weights answers with the forced logits."""

    def __init__(self, model, forced):
        self.patched = []
        for name, mod in model.named_modules():
            if name in forced:
                mod.forward = self._forced_forward(name, mod, forced[name])
                self.patched.append(mod)
        if len(self.patched) != len(forced):
            raise RuntimeError(f"forced {sorted(forced)}, patched {len(self.patched)} routers")

    @staticmethod
    def _forced_forward(name, mod, f):
        F = torch.nn.functional
        orig_forward, orig_linear = type(mod).forward, F.linear
        E = f.shape[-1]

        def fwd(hidden_states, *a, **k):
            used = []

            def linear(x, w, b=None):
                if w.dim() == 2 and w.shape[0] == E and not used:
                    used.append(True)
                    return f.to(x.dtype).reshape(*x.shape[:-1], E)
                return orig_linear(x, w, b)
            F.linear = linear
            try:
                out = orig_forward(mod, hidden_states, *a, **k)
            finally:
                F.linear = orig_linear
            if torch.is_tensor(out):
                return f.to(torch.float64)
            if not used:
                raise RuntimeError(f"{name}: the router's forward never called F.linear on its [{E}, H] weight")
            return out
        return fwd

    def close(self):
        for m in self.patched:
            del m.forward


def choice_gap(router_logits, bias, k, scaling_sigmoid=True):
    """Smallest gap between the k-th and (k+1)-th choice score (sigmoid(logit) + correction bias) over all rows."""
    s = torch.sigmoid(router_logits.to(torch.float64)) if scaling_sigmoid else router_logits.to(torch.float64)
    if bias is not None:
        s = s + bias.to(torch.float64)
    top = s.sort(-1, descending=True).values
    return float((top[:, k - 1] - top[:, k]).min())


def correction_biases(model):
    out = {}
    for name, prm in model.named_parameters():
        if name.endswith("e_score_correction_bias"):
            out[name.rsplit(".", 1)[0]] = prm.detach().to(torch.float64)
    return out


class DtypeAudit:
    """Forward hooks on every module: names of modules whose floating outputs are not float64."""

    def __init__(self, model):
        self.leaks = set()
        self.handles = [m.register_forward_hook(self._hook(n)) for n, m in model.named_modules() if n]

    def _hook(self, name):
        def hook(mod, inp, out):
            outs = out if isinstance(out, (tuple, list)) else [out]
            for o in outs:
                if torch.is_tensor(o) and o.is_floating_point() and o.dtype != torch.float64:
                    self.leaks.add(f"{name} ({type(mod).__name__}) {o.dtype}")
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


@contextlib.contextmanager
def no_dt_floor(model, active):
    """NemotronH's HF mixer (Zamba2's torch path) clamps dt from below at time_step_min (0.001) in prefill and
    decode; the training code (mamba_ssm's kernels, which HF's own CUDA path calls with dt_limit =
    time_step_limit) has no such floor. The reference follows the training code: while the context is open,
    a clamp of the mixer's dt at time_step_min becomes a clamp at time_step_limit[0]. Transformers has spelled
    the floor both as `self.time_step_min` and from the config, so the clamp itself is intercepted (inside the
    mixers' forwards only) and the attribute is zeroed too; `floors_removed` counts what was intercepted, and
    hybrid_main checks that removing the floor changes the logits where some dt lies below it."""
    mixers = [m for _, m in model.named_modules() if "Mixer" in type(m).__name__ and hasattr(m, "dt_bias")]
    if not active or not mixers:
        yield None
        return
    floor = float(getattr(model.config, "time_step_min", 0.0) or 0.0)
    lo = float((getattr(model.config, "time_step_limit", None) or (0.0,))[0])
    state = {"inside": 0, "floors_removed": 0}

    def unfloored(v):
        if state["inside"] and isinstance(v, float) and floor > 0 and abs(v - floor) <= 1e-12 * floor:
            state["floors_removed"] += 1
            return lo
        return v

    t_clamp, m_clamp, m_clamp_min = torch.clamp, torch.Tensor.clamp, torch.Tensor.clamp_min

    def clamp(x, min=None, max=None, *a, **k):
        return t_clamp(x, unfloored(min), max, *a, **k)

    def tensor_clamp(self, min=None, max=None, *a, **k):
        return m_clamp(self, unfloored(min), max, *a, **k)

    def tensor_clamp_min(self, min, *a, **k):
        return m_clamp_min(self, unfloored(min), *a, **k)

    saved = []
    for mod in mixers:
        orig = mod.forward

        def fwd(*a, _orig=orig, **k):
            state["inside"] += 1
            try:
                return _orig(*a, **k)
            finally:
                state["inside"] -= 1
        saved.append((mod, mod.__dict__.get("forward"), getattr(mod, "time_step_min", None)))
        mod.forward = fwd
        if hasattr(mod, "time_step_min"):
            mod.time_step_min = lo
    torch.clamp, torch.Tensor.clamp, torch.Tensor.clamp_min = clamp, tensor_clamp, tensor_clamp_min
    try:
        yield state
    finally:
        torch.clamp, torch.Tensor.clamp, torch.Tensor.clamp_min = t_clamp, m_clamp, m_clamp_min
        for mod, own_forward, v in saved:
            if own_forward is None:
                del mod.forward
            else:
                mod.forward = own_forward
            if v is not None:
                mod.time_step_min = v


def clean_forward(model, ids, p, config, audit=False, dt_floor=False):
    with hf_generic_clean_f64(model, gated_norm_groups=_n_groups(p), rope_theta=rope_theta_of(config)), \
            no_dt_floor(model, p["family"] == "nemotron_h" and not dt_floor) as floor:
        a = DtypeAudit(model) if audit else None
        try:
            logits = model(ids, use_cache=False).logits[0]
        finally:
            if a is not None:
                a.close()
        if floor is not None and floor["floors_removed"] == 0:
            raise RuntimeError("NemotronH: no clamp of dt at time_step_min was intercepted, so the reference "
                               "would keep HF's floor; see no_dt_floor")
    return logits, (sorted(a.leaks) if a is not None else None)


def _n_groups(p):
    return p.get("mamba_n_groups", 1)


def hf_cached_decode(model, ids, p, config):
    """Token by token with HF's cache: the one the model makes when use_cache is set, else (older Bamba /
    FalconH1) the family's hybrid cache class handed in."""
    import importlib
    mod = importlib.import_module(type(model).__module__)
    takes_cp = "cache_position" in inspect.signature(model.forward).parameters

    def step(t, past):
        kw = dict(use_cache=True)
        if past is not None:
            kw["past_key_values"] = past
        if takes_cp:
            kw["cache_position"] = torch.tensor([t])
        return model(ids[:, t:t + 1], **kw)

    rows = []
    with hf_generic_clean_f64(model, gated_norm_groups=_n_groups(p), rope_theta=rope_theta_of(config)), \
            no_dt_floor(model, p["family"] == "nemotron_h"):
        out = step(0, None)
        past = out.past_key_values
        if past is None:
            classes = [getattr(mod, n) for n in dir(mod) if n.endswith("DynamicCache") and "Hybrid" in n]
            if not classes:
                raise RuntimeError("no cache returned and no hybrid cache class found")
            L = config.num_hidden_layers
            try:
                past = classes[0](config, 1, dtype=torch.float64, devices=["cpu"] * L)
            except TypeError:
                past = classes[0](config, 1, dtype=torch.float64, device="cpu")
            out = step(0, past)
            past = out.past_key_values if out.past_key_values is not None else past
        rows.append(out.logits[0, -1])
        for t in range(1, ids.shape[1]):
            out = step(t, past)
            past = out.past_key_values if out.past_key_values is not None else past
            rows.append(out.logits[0, -1])
    return torch.stack(rows)


def comparisons(p, model_dir, config, ref, ids):
    res = {}
    with torch.no_grad():
        try:
            m32 = load_hf(p, model_dir).float().eval()
            res["hf_f32_as_is_defaults"] = err(m32(ids, use_cache=False).logits[0], ref)
            del m32
        except Exception as e:
            res["hf_f32_as_is_defaults"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        try:
            m = load_hf(p, model_dir, attn_implementation="sdpa").double().eval()
            res["hf_f64_as_is_sdpa"] = err(m(ids, use_cache=False).logits[0], ref)
            if p["family"] == "nemotron_h":
                res["hf_f64_clean_sdpa_with_dt_floor_time_step_min"] = err(
                    clean_forward(m, ids, p, config, dt_floor=True)[0], ref)
            try:
                res["hf_f64_clean_sdpa_cached_decode"] = err(hf_cached_decode(m, ids, p, config), ref)
            except Exception as e:
                res["hf_f64_clean_sdpa_cached_decode"] = {"error": f"{type(e).__name__}: {e}"[:300]}
            del m
        except Exception as e:
            res["hf_f64_as_is_sdpa"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        try:
            m = load_hf(p, model_dir, attn_implementation="eager").double().eval()
            res["hf_f64_clean_eager"] = err(clean_forward(m, ids, p, config)[0], ref)
            del m
        except Exception as e:
            res["hf_f64_clean_eager"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return res


def _layer_index(name):
    for part in name.split("."):
        if part.isdigit():
            return int(part)
    return -1


def hybrid_main(args, p):
    import transformers

    os.makedirs(args.out, exist_ok=True)
    gen = torch.Generator().manual_seed(p["seed"])
    config, model, used_kw, tries = build_model(p)
    hybrid_init(model, p, gen)
    model = model.to(torch.bfloat16)
    model.save_pretrained(args.out)
    for f_ in os.listdir(args.out):
        if f_ not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(args.out, f_))
    st_path = os.path.join(args.out, "model.safetensors")
    hdr = read_safetensors_header(st_path)
    weight_shapes = {k: [v["dtype"], v["shape"]] for k, v in sorted(hdr.items()) if k != "__metadata__"}
    print(json.dumps({"preset": args.preset, "weights": weight_shapes}), file=sys.stderr)
    with open(os.path.join(args.out, "config.json")) as f:
        cfg = json.load(f)

    # The saved folder must load back to the same values (names may be mapped on the way; values may not).
    with torch.no_grad():
        back = load_hf(p, args.out, attn_implementation="sdpa").eval()
        sd0 = model.state_dict()
        sd1 = back.state_dict()
        if sorted(sd0) != sorted(sd1):
            raise RuntimeError(f"reloaded names differ: {sorted(set(sd0) ^ set(sd1))}")
        for k in sd0:
            if not torch.equal(sd0[k].to(torch.float64), sd1[k].to(torch.float64)):
                raise RuntimeError(f"reloaded {k} differs")
        m64 = back.double().eval()
        del back

    moe = "n_routed_experts" in p
    E = p.get("n_routed_experts", 0)
    k_top = p.get("num_experts_per_tok", 0)
    biases = correction_biases(m64) if moe else {}
    stats = {}
    with torch.no_grad():
        for attempt in range(20):
            tok_seed = p["seed"] + 1 + attempt
            gen_tok = torch.Generator().manual_seed(tok_seed)
            tokens = torch.randint(0, p["vocab_size"], (p["n_tokens"],), generator=gen_tok).tolist()
            ids = torch.tensor([tokens], dtype=torch.long)
            tap = RouterTap(m64, E) if moe else None
            try:
                ref, leaks = clean_forward(m64, ids, p, config, audit=True)
            finally:
                if tap is not None:
                    tap.close()
            if not moe:
                break
            routers = dict(tap.out)
            if len(routers) != p["pattern"].count("E"):
                raise RuntimeError(f"router taps {sorted(routers)}: want {p['pattern'].count('E')}")
            gap = min(choice_gap(v, biases.get(n), k_top) for n, v in routers.items())
            stats["router_min_choice_gap"] = gap
            if gap >= p["min_topk_gap"]:
                break
        else:
            raise RuntimeError("no token stream with a clear top-k routing in 20 tries")
    if leaks:
        print(json.dumps({"WARNING fp32 outputs in the clean float64 run": leaks}), file=sys.stderr)
    with open(os.path.join(args.out, "tokens.json"), "w") as f:
        json.dump(tokens, f)
        f.write("\n")

    cmp = {} if args.skip_hf_check else comparisons(p, args.out, config, ref, ids)

    meta = {
        "reference": "Hugging Face " + p["cls"] + " in float64 with its fp32 casts removed "
                     "(tools/hf_f64.py hf_generic_clean_f64: .float()/.to(float32)/.type(float32) of float64 tensors "
                     "are no-ops, RoPE from float64 angles, gated norm per group; NemotronH: no dt floor at time_step_min, "
                     "as the training code), sdpa attention, eager experts, "
                     "full-sequence forward without cache, bf16 weights widened; rounded to fp32 at the end",
        "preset": args.preset,
        "seed": str(p["seed"]),
        "token_seed": str(tok_seed),
        "rows": str(len(tokens)),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "logits_std": f"{float(ref.std()):.4g}",
        "logits_max_abs": f"{float(ref.abs().max()):.4g}",
        "fp32_leaks": json.dumps(leaks),
        "config_keywords": json.dumps(sorted(used_kw)),
    }
    if moe:
        meta["router_min_choice_gap"] = f"{stats['router_min_choice_gap']:.4g}"
    for name, r in cmp.items():
        meta["vs_" + name] = json.dumps(r)
    how = write_logits(os.path.join(args.out, "reference_logits.safetensors"), ref.to(torch.float32), meta)

    forced_report = None
    if moe:
        names = sorted(routers, key=_layer_index)
        rt = {"p0/prompt_token_ids": torch.tensor(tokens, dtype=torch.int64)}
        for n in names:
            rt["p0/" + n] = routers[n].to(torch.float32)
        rmeta = {"layout": "flat", "modules": ",".join(names), "num_prompts": "1",
                 "source": "Hugging Face " + p["cls"] + ", float64 with its fp32 casts removed, router logits "
                           "(the router module's [T, E] output, before sigmoid, correction bias and top-k), "
                           "full-sequence forward without cache; rounded to fp32",
                 "transformers_version": transformers.__version__}
        write_safetensors(os.path.join(args.out, "router_logits.safetensors"), sorted(rt.items()), rmeta)
        forced_report = forced_routing(p, m64, config, ids, tokens, routers, biases, names, ref, args.out)

    report = {"preset": args.preset, "out": args.out, "logits_writer": how, "config_tries": tries,
              "files": {f_: os.path.getsize(os.path.join(args.out, f_)) for f_ in sorted(os.listdir(args.out))},
              "config_json": cfg, "weights": weight_shapes, "meta": meta, "forced_routing": forced_report}
    print(json.dumps(report, indent=1))
    summary = {"preset": args.preset, "out": args.out, "fp32_leaks": leaks,
               **{k: (v.get("max_abs"), v.get("rel_fro")) if "error" not in v else v["error"] for k, v in cmp.items()}}
    print("SUMMARY " + json.dumps(summary), file=sys.stderr)
    return 0


def forced_routing(p, m64, config, ids, tokens, routers, biases, names, ref, out_dir):
    """Router logits that change most tokens' experts (natural ones with the expert axis reversed plus noise,
    the first seed whose choice scores keep a clear top-k gap), and HF's float64 logits under them."""
    k = p["num_experts_per_tok"]
    for attempt in range(20):
        gen = torch.Generator().manual_seed(p["seed"] + 100 + attempt)
        forced = {}
        for n in names:
            nat = routers[n].to(torch.float64)
            noise = torch.randn(nat.shape, generator=gen, dtype=torch.float64)
            forced[n] = (nat.flip(-1) + 0.5 * float(nat.std()) * noise).to(torch.float32)
        gap = min(choice_gap(forced[n], biases.get(n), k) for n in names)
        if gap >= p["min_topk_gap"]:
            break
    else:
        raise RuntimeError("no forced routing with a clear top-k gap in 20 tries")
    with torch.no_grad():
        force = RouterForce(m64, forced)
        try:
            flog, _ = clean_forward(m64, ids, p, config)
        finally:
            force.close()
        again, _ = clean_forward(m64, ids, p, config)
    changed = {}
    for n in names:
        def sets(lg):
            s = torch.sigmoid(lg.to(torch.float64)) + (biases[n] if n in biases else 0.0)
            return [tuple(sorted(r.topk(k).indices.tolist())) for r in s]
        changed[n] = sum(a != b for a, b in zip(sets(forced[n]), sets(routers[n])))
    meta = {"source": "Hugging Face " + p["cls"] + " float64 clean, every router's output replaced by "
                      "forced_router_logits.safetensors (widened); rounded to fp32",
            "seed": str(p["seed"] + 100 + attempt), "min_choice_gap": f"{gap:.4g}",
            "topk_sets_changed": json.dumps(changed), "vs_natural": json.dumps(err(flog, ref)),
            "released_vs_natural": json.dumps(err(again, ref))}
    write_logits(os.path.join(out_dir, "forced_reference_logits.safetensors"), flog.to(torch.float32), meta)
    rt = {"p0/prompt_token_ids": torch.tensor(tokens, dtype=torch.int64)}
    for n in names:
        rt["p0/" + n] = forced[n]
    write_safetensors(os.path.join(out_dir, "forced_router_logits.safetensors"), sorted(rt.items()),
                      {"layout": "flat", "modules": ",".join(names), "num_prompts": "1",
                       "source": "natural router logits, experts reversed, plus noise; rounded to fp32"})
    return meta
