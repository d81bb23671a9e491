"""GraniteMoeHybridForCausalLM: the preset granite-hybrid of hf_reference.py (which is the command line).
Mamba2 and attention layers, each followed by a top-k MoE plus a shared SwiGLU MLP, with the µP multipliers of
Granite 4.0 (equations in docs/granite-hybrid.md).

    granite_main(args, p)       builds the checkpoint (bf16, save_pretrained), tokens.json,
                                reference_logits.safetensors and router_logits.safetensors in args.out
    granite_reference_forward   the float64 reference (its Mamba layers are ref64.mamba2_mixer64)
    granite_hf_comparisons      the same logits and router logits from Hugging Face in float64
                                (hf_f64.granite_hf_clean_f64), as shipped and clean
    granite_load, granite_layer_kinds, granite_rope_theta, granite_head_dim, granite_mamba_dims
                                config readers, also used by capture_hf.py and hf_forced_routing.py

Needs torch and transformers; computes on the CPU and downloads nothing.
"""

import json
import math
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network (e.g. hub kernels)

import torch  # noqa: E402

from hf_f64 import granite_hf_clean_f64  # noqa: E402
from ref64 import err, json_float, mamba2_mixer64, rmsnorm64, silu64  # noqa: E402
from safetensors_io import load_tensors, read_safetensors_header, write_logits, write_safetensors  # noqa: E402

GRANITE_PRESETS = {
    # GraniteMoeHybridForCausalLM: mamba, attention, mamba, attention; every layer has a top-2-of-8 MoE plus a
    # shared SwiGLU MLP; GQA (4 query heads, 2 key/value heads, head_dim 16), RoPE, non-trivial µP
    # multipliers (attention_multiplier 1/16 differs from 1/sqrt(16)), untied head. 100 tokens with chunk 32
    # cross 32, 64 and 96.
    "granite-hybrid": dict(
        arch="granite", vocab_size=256, hidden_size=64, num_hidden_layers=4,
        layer_types=("mamba", "attention", "mamba", "attention"),
        num_attention_heads=4, num_key_value_heads=2, attention_bias=False,
        mamba_n_heads=4, mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_chunk_size=32,
        mamba_d_conv=4, mamba_expand=2, mamba_conv_bias=True, mamba_proj_bias=False,
        num_local_experts=8, num_experts_per_tok=2, intermediate_size=32, shared_intermediate_size=48,
        embedding_multiplier=12.0, attention_multiplier=0.0625, residual_multiplier=0.25, logits_scaling=4.0,
        position_embedding_type="rope", rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
        embed_std=0.05, lm_head_std=0.5, min_topk_gap=1e-4,
        n_tokens=100, seed=2468,
    ),
}

GRANITE_REQUIRED_CONFIG_KEYS = [
    "architectures", "model_type", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "rms_norm_eps", "position_embedding_type", "attention_bias", "embedding_multiplier",
    "attention_multiplier", "residual_multiplier", "logits_scaling", "num_local_experts", "num_experts_per_tok",
    "intermediate_size", "shared_intermediate_size", "tie_word_embeddings", "layer_types", "mamba_n_heads",
    "mamba_n_groups", "mamba_d_state", "mamba_d_head", "mamba_d_conv", "mamba_expand", "mamba_chunk_size",
    "mamba_conv_bias", "mamba_proj_bias", "hidden_act",
]

# transformers >= 5 names the MoE parameters differently in its modules than in checkpoints (its
# save_pretrained still writes the original names, the same tensors): checkpoint name -> module name.
GRANITE_MODULE_NAME = {
    "block_sparse_moe.input_linear.weight": "block_sparse_moe.experts.gate_up_proj",
    "block_sparse_moe.output_linear.weight": "block_sparse_moe.experts.down_proj",
    "block_sparse_moe.router.layer.weight": "block_sparse_moe.router.weight",
}


def granite_module_name(ckpt_name):
    for a, b in GRANITE_MODULE_NAME.items():
        if ckpt_name.endswith(a):
            return ckpt_name[: -len(a)] + b
    return ckpt_name


def _first(g, *names):
    for n in names:
        v = g(n)
        if v is not None:
            return v
    raise KeyError(f"none of {names} in the checkpoint")


GRANITE_LAYER_KIND = {"mamba": "mamba", "linear_attention": "mamba", "attention": "attention",
                      "full_attention": "attention"}


def build_granite_config(p):
    import inspect
    from transformers import GraniteMoeHybridConfig
    keys = ["vocab_size", "hidden_size", "num_hidden_layers", "layer_types", "num_attention_heads",
            "num_key_value_heads", "mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups",
            "mamba_chunk_size", "mamba_d_conv", "mamba_expand", "mamba_conv_bias", "mamba_proj_bias",
            "num_local_experts", "num_experts_per_tok", "intermediate_size", "shared_intermediate_size",
            "embedding_multiplier", "attention_multiplier", "residual_multiplier", "logits_scaling",
            "position_embedding_type", "rms_norm_eps", "attention_bias", "tie_word_embeddings"]
    kw = {k: p[k] for k in keys}
    kw["layer_types"] = list(p["layer_types"])
    kw.update(hidden_act="silu", max_position_embeddings=4096, initializer_range=0.02, attention_dropout=0.0,
              bos_token_id=0, eos_token_id=0, pad_token_id=None)
    params = inspect.signature(GraniteMoeHybridConfig.__init__).parameters
    if "rope_parameters" in params:
        kw["rope_parameters"] = {"rope_type": "default", "rope_theta": p["rope_theta"]}
    else:
        kw["rope_theta"] = p["rope_theta"]
    return GraniteMoeHybridConfig(**kw)


def granite_init(model, p, gen):
    """Every parameter from a fixed generator, by name: realistic Mamba2 A, dt_bias and D, norm weights
    around 1, projections N(0, 1/fan_in); rounded to bf16."""

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    def uniform(shape, lo, hi):
        return torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo

    new = {}
    for name, prm in model.named_parameters():
        shp = tuple(prm.shape)
        leaf = name.rsplit(".", 1)[-1]
        if name == "model.embed_tokens.weight":
            v = normal(shp, p["embed_std"])
        elif name == "lm_head.weight":
            v = normal(shp, p["lm_head_std"])
        elif leaf == "A_log":  # A = -exp(A_log) uniform in [-16, -1]
            v = torch.log(uniform(shp, 1.0, 16.0))
        elif leaf == "dt_bias":  # softplus(dt_bias) log-uniform in [1e-3, 1e-1]
            dt = torch.exp(uniform(shp, math.log(1e-3), math.log(1e-1))).clamp(min=1e-4)
            v = dt + torch.log(-torch.expm1(-dt))
        elif leaf == "D":
            v = normal(shp, 0.05, 1.0)
        elif "norm" in name and leaf == "weight":
            v = normal(shp, 0.1, 1.0)
        elif "conv1d" in name and leaf == "weight":
            v = uniform(shp, -0.5, 0.5)
        elif "conv1d" in name and leaf == "bias":
            v = normal(shp, 0.1)
        elif leaf == "bias":
            v = normal(shp, 0.05)
        elif (leaf == "weight" and len(shp) in (2, 3)) or leaf in ("gate_up_proj", "down_proj"):
            v = normal(shp, 1.0 / math.sqrt(shp[-1]))
        else:
            raise RuntimeError(f"no init rule for parameter {name} {shp}")
        new[name] = v
    params = dict(model.named_parameters())
    with torch.no_grad():
        for k, v in new.items():
            params[k].copy_(v.to(torch.bfloat16).to(params[k].dtype))
    return model


def granite_layer_kinds(cfg):
    L = cfg["num_hidden_layers"]
    lt = cfg.get("layer_types")
    if lt is None:
        lt = cfg.get("layers_block_type")
    if lt is None:
        lt = ["mamba"] * L
    assert len(lt) == L, "layer_types must have num_hidden_layers entries"
    return [GRANITE_LAYER_KIND[t] for t in lt]


def granite_rope_theta(cfg):
    if cfg.get("rope_theta") is not None:
        return float(cfg["rope_theta"])
    rp = cfg.get("rope_parameters") or {}
    assert rp.get("rope_type", "default") == "default", f"rope type {rp.get('rope_type')} not handled"
    return float(rp["rope_theta"])


def granite_head_dim(cfg):
    return cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]


def granite_mamba_dims(cfg):
    H = cfg["hidden_size"]
    I = int(cfg["mamba_expand"] * H)
    nh = cfg["mamba_n_heads"]
    P = cfg["mamba_d_head"]
    if P == "auto":
        P = I // nh
    assert nh * P == I and nh % cfg["mamba_n_groups"] == 0
    return I, nh, P, cfg["mamba_d_state"], cfg["mamba_n_groups"], cfg["mamba_d_conv"]


def _rope64(x, theta):
    """x: [T, heads, d]. Position t rotates the pairs (i, i + d/2) by t * theta^(-2i/d) (rotate_half)."""
    T, _, d = x.shape
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)[:, None, :]
    rot = torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * emb.cos() + rot * emb.sin()


def _attention64(xn, g, cfg, rope_theta):
    """Causal GQA attention; scores scaled by attention_multiplier (not 1/sqrt(d)); RoPE when rope_theta."""
    T = xn.shape[0]
    nq, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = granite_head_dim(cfg)

    def proj(name):
        y = xn @ g(name + ".weight").T
        if g(name + ".bias") is not None:
            y = y + g(name + ".bias")
        return y

    q = proj("q_proj").reshape(T, nq, d)
    k = proj("k_proj").reshape(T, nkv, d)
    v = proj("v_proj").reshape(T, nkv, d)
    if rope_theta is not None:
        q = _rope64(q, rope_theta)
        k = _rope64(k, rope_theta)
    rep = nq // nkv
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    out = torch.zeros(T, nq, d, dtype=torch.float64)
    for h in range(nq):
        kv = h // rep  # repeat_kv: query head h reads key/value head h // (nq / nkv)
        s = (q[:, h] @ k[:, kv].T) * cfg["attention_multiplier"]
        s = s.masked_fill(~causal, float("-inf"))
        e = torch.exp(s - s.max(-1, keepdim=True).values)
        out[:, h] = (e / e.sum(-1, keepdim=True)) @ v[:, kv]
    o = out.reshape(T, nq * d) @ g("o_proj.weight").T
    if g("o_proj.bias") is not None:
        o = o + g("o_proj.bias")
    return o


def _swiglu64(x, w_in, w_out):
    """w_in [2F, H]: rows [0, F) are the gate (SiLU), rows [F, 2F) the up projection; w_out [H, F]."""
    hcat = x @ w_in.T
    F_ = hcat.shape[-1] // 2
    return (silu64(hcat[..., :F_]) * hcat[..., F_:]) @ w_out.T


def _moe64(xn, g, k_top, stats, forced=None):
    """Top-k routing: router logits [T, E]; the k largest (ties to the lower index), softmax over those k;
    sum of gate * SwiGLU expert. Returns (out [T, H], router logits [T, E]). `forced` [T, E] stands in for
    the router's output (forced routing)."""
    logits = xn @ _first(g, "router.layer.weight", "router.weight").T if forced is None else forced
    T, E = logits.shape
    w_in = _first(g, "input_linear.weight", "experts.gate_up_proj")  # [E, 2F, H]
    w_out = _first(g, "output_linear.weight", "experts.down_proj")   # [E, H, F]
    out = torch.zeros_like(xn)
    for t in range(T):
        order = sorted(range(E), key=lambda e: (-float(logits[t, e]), e))
        top = order[:k_top]
        if k_top < E:
            gap = float(logits[t, order[k_top - 1]] - logits[t, order[k_top]])
            stats["router_min_topk_gap"] = min(stats.get("router_min_topk_gap", float("inf")), gap)
        vals = logits[t, top]
        gates = torch.exp(vals - vals.max())
        gates = gates / gates.sum()
        for j, e in enumerate(top):
            out[t] = out[t] + gates[j] * _swiglu64(xn[t], w_in[e], w_out[e])
            stats.setdefault("expert_hits", [0] * E)[e] += 1
    return out, logits


def granite_reference_forward(W, cfg, tokens, stats=None, rope=True, forced_routers=None):
    """Float64 GraniteMoeHybrid forward from the checkpoint's values widened. Returns (logits [T, vocab],
    {router module name: router logits [T, E]}). rope=False drops RoPE (position_embedding_type None/"nope").
    forced_routers {router module name: [T, E]} replaces those routers' logits (forced routing)."""
    stats = {} if stats is None else stats
    L = cfg["num_hidden_layers"]
    eps = cfg["rms_norm_eps"]
    mult_r = cfg["residual_multiplier"]
    kinds = granite_layer_kinds(cfg)
    theta = granite_rope_theta(cfg) if (rope and cfg.get("position_embedding_type") == "rope") else None
    I, nh, P, N, G, K = granite_mamba_dims(cfg)
    tsl = cfg.get("time_step_limit") or [0.0, float("inf")]
    lo, hi = (json_float(v) for v in tsl)
    E = cfg["num_local_experts"]
    ids = torch.tensor(tokens, dtype=torch.long)

    h = W["model.embed_tokens.weight"][ids] * cfg["embedding_multiplier"]
    routers = {}
    for l in range(L):
        pre = f"model.layers.{l}."
        residual = h
        xn = rmsnorm64(h, W[pre + "input_layernorm.weight"], eps)
        if kinds[l] == "mamba":
            out, nc, nd = mamba2_mixer64(xn, lambda name: W.get(pre + "mamba." + name), I, nh, P, N, G, K,
                                          eps, lo, hi, False)
            stats["dt_clamped"] = stats.get("dt_clamped", 0) + nc
            stats["dt_total"] = stats.get("dt_total", 0) + nd
        else:
            out = _attention64(xn, lambda name: W.get(pre + "self_attn." + name), cfg, theta)
        h = residual + out * mult_r
        residual = h
        xn = rmsnorm64(h, W[pre + "post_attention_layernorm.weight"], eps)
        ffn = _swiglu64(xn, W[pre + "shared_mlp.input_linear.weight"], W[pre + "shared_mlp.output_linear.weight"])
        if E > 0:
            forced = (forced_routers or {}).get(pre + "block_sparse_moe.router")
            moe, rl = _moe64(xn, lambda name: W.get(pre + "block_sparse_moe." + name), cfg["num_experts_per_tok"],
                             stats, None if forced is None else forced.to(torch.float64))
            routers[pre + "block_sparse_moe.router"] = rl
            ffn = moe + ffn
        h = residual + ffn * mult_r
        stats.setdefault("residual_rms_per_layer", []).append(float(h.pow(2).mean().sqrt()))
    h = rmsnorm64(h, W["model.norm.weight"], eps)
    lm = W.get("lm_head.weight")
    if lm is None:
        lm = W["model.embed_tokens.weight"]
    return (h @ lm.T) / cfg["logits_scaling"], routers


class RouterTap:
    """Forward hooks keeping the pre-top-k router logits [T, E] of every MoE layer of the latest forward."""

    def __init__(self, model):
        self.out = {}
        self.handles = []
        E = model.config.num_local_experts
        for name, mod in model.named_modules():
            if not name.endswith("block_sparse_moe.router"):
                continue
            lin = getattr(mod, "layer", None)
            if isinstance(lin, torch.nn.Linear):
                self.handles.append(lin.register_forward_hook(self._keep(name, E)))
            else:
                self.handles.append(mod.register_forward_hook(self._keep(name, E)))

    def _keep(self, name, E):
        def hook(mod, inp, out):
            cands = [out] if torch.is_tensor(out) else [o for o in out if torch.is_tensor(o)]
            cands = [c for c in cands if c.is_floating_point() and c.shape[-1] == E]
            if not cands:
                raise RuntimeError(f"{name}: no [T, {E}] router logits in the module output")
            self.out[name] = cands[-1].detach().reshape(-1, E).clone()
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def topk_sets(logits, k):
    return [tuple(sorted(row.topk(k).indices.tolist())) for row in logits]


def granite_hf_decode(model, ids):
    """Token by token with HF's own cache (transformers >= 5 makes one when use_cache is set)."""
    rows = []
    past = None
    for t in range(ids.shape[1]):
        kw = dict(use_cache=True)
        if past is not None:
            kw["past_key_values"] = past
        out = model(ids[:, t:t + 1], **kw)
        past = out.past_key_values
        rows.append(out.logits[0, -1])
    return torch.stack(rows)


def granite_load(model_dir, **kw):
    """from_pretrained with the eager (per-expert loop) MoE, which computes in any dtype."""
    from transformers import GraniteMoeHybridForCausalLM
    try:
        return GraniteMoeHybridForCausalLM.from_pretrained(model_dir, experts_implementation="eager", **kw)
    except (TypeError, ValueError, KeyError):
        return GraniteMoeHybridForCausalLM.from_pretrained(model_dir, **kw)


def granite_hf_comparisons(model_dir, cfg, ref64, ref_routers, ref64_nope, tokens):
    from transformers import GraniteMoeHybridForCausalLM
    ids = torch.tensor([tokens], dtype=torch.long)
    theta = granite_rope_theta(cfg)
    dim = granite_head_dim(cfg)
    res = {}
    hf_routers = None
    with torch.no_grad():
        try:
            m32 = GraniteMoeHybridForCausalLM.from_pretrained(model_dir).float().eval()
            res["hf_f32_as_is_defaults"] = err(m32(ids, use_cache=False).logits[0], ref64)
            res["hf_f32_as_is_defaults"]["implementations"] = (
                f"attn {m32.config._attn_implementation}, "
                f"experts {getattr(m32.config, '_experts_implementation', None)}")
            del m32
        except Exception as e:
            res["hf_f32_as_is_defaults"] = {"error": f"{type(e).__name__}: {e}"[:300]}
        for impl in ("sdpa", "eager"):
            model = granite_load(model_dir, attn_implementation=impl).double().eval()
            res[f"implementations_{impl}"] = (f"attn {model.config._attn_implementation}, "
                                              f"experts {getattr(model.config, '_experts_implementation', None)}")
            res[f"hf_f64_as_is_{impl}"] = err(model(ids, use_cache=False).logits[0], ref64)
            with granite_hf_clean_f64(model, cfg["mamba_n_groups"], theta, dim):
                tap = RouterTap(model)
                try:
                    res[f"hf_f64_clean_{impl}"] = err(model(ids, use_cache=False).logits[0], ref64)
                    if impl == "sdpa":
                        hf_routers = dict(tap.out)
                finally:
                    tap.close()
                if impl == "sdpa":
                    try:
                        res["hf_f64_clean_sdpa_cached_decode"] = err(granite_hf_decode(model, ids), ref64)
                    except Exception as e:  # API differs across versions; report, don't fail
                        res["hf_f64_clean_sdpa_cached_decode"] = {"error": f"{type(e).__name__}: {e}"[:300]}
            del model
        # position_embedding_type "nope" and None: no RoPE at all
        for pet in ("nope", None):
            key = f"hf_f64_clean_sdpa_position_{pet}_vs_own_without_rope"
            try:
                model = granite_load(model_dir, attn_implementation="sdpa",
                                     position_embedding_type=pet).double().eval()
                with granite_hf_clean_f64(model, cfg["mamba_n_groups"], theta, dim):
                    res[key] = err(model(ids, use_cache=False).logits[0], ref64_nope)
                    res[key]["rotary_emb"] = type(model.model.rotary_emb).__name__
                del model
            except Exception as e:
                res[key] = {"error": f"{type(e).__name__}: {e}"[:300]}
    if hf_routers is None or sorted(hf_routers) != sorted(ref_routers):
        raise RuntimeError(f"router taps {sorted(hf_routers or {})} vs reference {sorted(ref_routers)}")
    k = cfg["num_experts_per_tok"]
    rr = {}
    for name in sorted(ref_routers, key=lambda s: int(s.split(".")[2])):
        e = err(hf_routers[name], ref_routers[name])
        e["topk_set_mismatches"] = sum(a != b for a, b in zip(topk_sets(hf_routers[name], k),
                                                              topk_sets(ref_routers[name], k)))
        rr[name] = e
    res["router_logits_hf_vs_own"] = rr
    return res, hf_routers


def granite_config_probes():
    """What this transformers version does with the spellings and keys a reader meets (for the docs)."""
    from transformers import GraniteMoeHybridConfig
    base = dict(vocab_size=32, hidden_size=16, num_hidden_layers=2, num_attention_heads=2, mamba_n_heads=2,
                mamba_d_state=4, intermediate_size=8, shared_intermediate_size=8)
    out = {}
    for lt in (["mamba", "attention"], ["mamba", "full_attention"], ["linear_attention", "full_attention"]):
        try:
            c = GraniteMoeHybridConfig(layer_types=lt, **base)
            out["layer_types=" + ",".join(lt)] = "accepted -> layers_block_type " + repr(c.layers_block_type)
        except Exception as e:
            out["layer_types=" + ",".join(lt)] = f"refused: {type(e).__name__}: {e}"[:300]
    try:
        c = GraniteMoeHybridConfig.from_dict(dict(base, layers_block_type=["attention", "mamba"]))
        out["key layers_block_type"] = "-> layer_types " + repr(getattr(c, "layer_types", None))
    except Exception as e:
        out["key layers_block_type"] = f"refused: {type(e).__name__}: {e}"[:300]
    for pet in ("nope", "rope", None, "alibi"):
        try:
            c = GraniteMoeHybridConfig(position_embedding_type=pet, **base)
            out[f"position_embedding_type={pet}"] = "accepted"
        except Exception as e:
            out[f"position_embedding_type={pet}"] = f"refused: {type(e).__name__}: {e}"[:300]
    d = GraniteMoeHybridConfig()
    out["defaults"] = {k: repr(getattr(d, k, "<absent>")) for k in (
        "time_step_limit", "time_step_min", "time_step_max", "tie_word_embeddings", "rms_norm_eps",
        "num_key_value_heads", "mamba_d_head", "position_embedding_type", "rope_theta", "rope_parameters",
        "attention_bias", "hidden_act", "num_local_experts", "layer_types", "head_dim")}
    out["config_json_keys_of_default"] = sorted(d.to_diff_dict())
    return out


def granite_main(args, p):
    import transformers
    from transformers import GraniteMoeHybridForCausalLM

    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(p["seed"])
    gen = torch.Generator().manual_seed(p["seed"])
    config = build_granite_config(p)
    model = GraniteMoeHybridForCausalLM(config).eval()
    granite_init(model, p, gen)
    model = model.to(torch.bfloat16)
    model.save_pretrained(args.out)

    cfg_path = os.path.join(args.out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    added = []
    for k in GRANITE_REQUIRED_CONFIG_KEYS:
        if k not in cfg:
            v = getattr(config, k, p.get(k)) if k != "architectures" else ["GraniteMoeHybridForCausalLM"]
            cfg[k] = list(v) if isinstance(v, tuple) else v
            added.append(k)
    if cfg.get("rope_theta") is None and "rope_theta" not in (cfg.get("rope_parameters") or {}):
        cfg["rope_theta"] = p["rope_theta"]
        added.append("rope_theta")
    if added:
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
    for f_ in os.listdir(args.out):
        if f_ not in ("config.json", "model.safetensors"):
            os.remove(os.path.join(args.out, f_))

    st_path = os.path.join(args.out, "model.safetensors")
    hdr = read_safetensors_header(st_path)
    weight_shapes = {k: v["shape"] for k, v in sorted(hdr.items()) if k != "__metadata__"}
    print(json.dumps({"weights": weight_shapes}), file=sys.stderr)
    dtypes = sorted({v["dtype"] for k, v in hdr.items() if k != "__metadata__"})
    if dtypes != ["BF16"]:
        raise RuntimeError(f"checkpoint dtypes {dtypes}, expected only BF16")
    tensors = load_tensors(st_path)
    W = {k: v.to(torch.float64) for k, v in tensors.items()}
    sd = model.state_dict()
    expected = set(sd) - ({"lm_head.weight"} if cfg["tie_word_embeddings"] else set())
    as_module = {granite_module_name(k): k for k in tensors}
    if not expected <= set(as_module) <= set(sd):
        raise RuntimeError(f"checkpoint names {sorted(tensors)} vs model {sorted(sd)}")
    for k, ck in as_module.items():
        if not torch.equal(tensors[ck], sd[k]):
            raise RuntimeError(f"saved tensor {ck} differs from the model's {k}")

    # The token stream: the first seed whose routing has no near-tie between the k-th and (k+1)-th router
    # logit (an fp32 engine must pick the same experts as the float64 reference).
    for attempt in range(20):
        tok_seed = p["seed"] + 1 + attempt
        gen_tok = torch.Generator().manual_seed(tok_seed)
        tokens = torch.randint(0, p["vocab_size"], (p["n_tokens"],), generator=gen_tok).tolist()
        stats = {}
        ref64, ref_routers = granite_reference_forward(W, cfg, tokens, stats)
        if stats.get("router_min_topk_gap", float("inf")) >= p["min_topk_gap"]:
            break
    else:
        raise RuntimeError("no token stream with a clear top-k routing in 20 tries")
    with open(os.path.join(args.out, "tokens.json"), "w") as f:
        json.dump(tokens, f)
        f.write("\n")
    ref64_nope, _ = granite_reference_forward(W, cfg, tokens, rope=False)

    cmp, hf_routers = ({}, None) if args.skip_hf_check else granite_hf_comparisons(
        args.out, cfg, ref64, ref_routers, ref64_nope, tokens)

    # The texts naming tools/hf_reference.py are in the committed fixtures (byte-reproducible): keep them.
    meta = {
        "reference": "float64 own implementation (tools/hf_reference.py granite_reference_forward): Mamba2 "
                     "layers as the sequential recurrence, dt clamped to time_step_limit, gated RMSNorm per "
                     "group; attention with RoPE from float64 angles, scores * attention_multiplier; "
                     "top-k router then softmax over the k; SwiGLU experts + shared MLP; bf16 weights widened to "
                     "float64; rounded to fp32 at the end",
        "preset": args.preset,
        "seed": str(p["seed"]),
        "token_seed": str(tok_seed),
        "rows": str(len(tokens)),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "logits_std": f"{float(ref64.std()):.4g}",
        "logits_max_abs": f"{float(ref64.abs().max()):.4g}",
        "residual_rms_per_layer": json.dumps([round(v, 4) for v in stats["residual_rms_per_layer"]]),
        "router_min_topk_gap": f"{stats['router_min_topk_gap']:.4g}",
        "time_step_limit": json.dumps([json_float(v) for v in (cfg.get("time_step_limit") or [0.0, float("inf")])]),
        "dt_clamped": f"{stats.get('dt_clamped', 0)}/{stats.get('dt_total', 0)}",
        "expert_hits": json.dumps(stats["expert_hits"]),
    }
    for name, r in cmp.items():
        meta["vs_" + name] = json.dumps(r)
    if "hf_f64_clean_sdpa" in cmp:
        meta["max_abs_diff_vs_hf"] = repr(cmp["hf_f64_clean_sdpa"]["max_abs"])
        meta["rel_fro_vs_hf"] = repr(cmp["hf_f64_clean_sdpa"]["rel_fro"])
    how = write_logits(os.path.join(args.out, "reference_logits.safetensors"), ref64.to(torch.float32), meta)

    if hf_routers is not None:
        names = sorted(hf_routers, key=lambda s: int(s.split(".")[2]))
        rt = {"p0/prompt_token_ids": torch.tensor(tokens, dtype=torch.int64)}
        for n in names:
            rt["p0/" + n] = hf_routers[n].to(torch.float32)
        rmeta = {"layout": "flat", "modules": ",".join(names), "num_prompts": "1",
                 "source": "Hugging Face GraniteMoeHybridForCausalLM, float64 with its fp32 casts removed "
                           "(tools/hf_reference.py granite_hf_clean_f64), pre-top-k router logits "
                           "(the router's [T, E] logits output), full-sequence forward without cache; rounded to fp32",
                 "transformers_version": transformers.__version__,
                 "vs_own_reference": json.dumps(cmp["router_logits_hf_vs_own"])}
        write_safetensors(os.path.join(args.out, "router_logits.safetensors"), sorted(rt.items()), rmeta)

    report = {"preset": args.preset, "out": args.out, "config_keys_added": added, "logits_writer": how,
              "files": {f_: os.path.getsize(os.path.join(args.out, f_)) for f_ in sorted(os.listdir(args.out))},
              "weights": weight_shapes, "meta": meta,
              "config_probes": None if args.skip_hf_check else granite_config_probes()}
    print(json.dumps(report, indent=1))
    return 0
