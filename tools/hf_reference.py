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

The reference is this file's own float64 forward (`reference_forward`) in the semantics of the original
mamba_ssm code, computed from the bf16 weights of the saved file widened to float64:
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
Its reference is `granite_reference_forward` (equations in docs/granite-hybrid.md), checked against HF in
float64 by `granite_hf_comparisons`.

    python tools/hf_reference.py --preset granite-hybrid --out tests/data/granite_hybrid --forced-routing
adds, to a folder this preset built (its checkpoint and tokens are read, not rewritten):
    forced_router_logits.safetensors     router logits to inject (same layout as router_logits.safetensors):
                                         per layer the natural ones, experts reversed, plus noise; most tokens'
                                         top-k sets change
    forced_reference_logits.safetensors  `logits` [len(tokens), vocab]: HF float64 (fp32 casts removed) with
                                         every router's logits replaced by those, rounded to fp32; checked
                                         against the own reference under the same forcing
"""

import argparse
import contextlib
import json
import math
import os
import struct
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network (e.g. hub kernels)

import torch

PRESETS = {
    # n_groups = 1, tied head, no projection biases, infinite time_step_limit: HF and mamba_ssm agree.
    # 140 tokens with chunk_size 32 cross the chunk boundaries at 32, 64, 96 and 128.
    "mamba2-g1": dict(
        vocab_size=256, hidden_size=64, num_hidden_layers=2, num_heads=4, head_dim=32, state_size=16,
        n_groups=1, expand=2, conv_kernel=4, chunk_size=32, use_bias=False, use_conv_bias=True,
        tie_word_embeddings=True, time_step_limit=(0.0, float("inf")), norm_before_gate=False,
        n_tokens=140, seed=1234,
    ),
    # n_groups = 2, projection biases, finite time_step_limit (some dt are clamped), untied head.
    # Hugging Face's gated norm (whole width) differs from mamba_ssm's (per group) here.
    "mamba2-g2": dict(
        vocab_size=320, hidden_size=64, num_hidden_layers=3, num_heads=8, head_dim=16, state_size=16,
        n_groups=2, expand=2, conv_kernel=4, chunk_size=32, use_bias=True, use_conv_bias=True,
        tie_word_embeddings=False, time_step_limit=(0.0, 0.05), norm_before_gate=False,
        n_tokens=100, seed=4321,
    ),
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

REQUIRED_CONFIG_KEYS = [
    "architectures", "vocab_size", "hidden_size", "num_hidden_layers", "num_heads", "head_dim", "state_size",
    "n_groups", "expand", "conv_kernel", "chunk_size", "use_bias", "use_conv_bias", "layer_norm_epsilon",
    "rms_norm", "norm_before_gate", "residual_in_fp32", "tie_word_embeddings", "time_step_limit", "hidden_act",
]


# ----------------------------------------------------------------------------------------------------------
# Model construction
# ----------------------------------------------------------------------------------------------------------

def build_config(p):
    from transformers import Mamba2Config
    return Mamba2Config(
        vocab_size=p["vocab_size"], hidden_size=p["hidden_size"], num_hidden_layers=p["num_hidden_layers"],
        num_heads=p["num_heads"], head_dim=p["head_dim"], state_size=p["state_size"], n_groups=p["n_groups"],
        expand=p["expand"], conv_kernel=p["conv_kernel"], chunk_size=p["chunk_size"], use_bias=p["use_bias"],
        use_conv_bias=p["use_conv_bias"], tie_word_embeddings=p["tie_word_embeddings"],
        time_step_limit=tuple(p["time_step_limit"]), layer_norm_epsilon=1e-5, rms_norm=True,
        residual_in_fp32=True, hidden_act="silu", time_step_min=0.001, time_step_max=0.1,
        time_step_floor=1e-4, bos_token_id=0, eos_token_id=0, pad_token_id=0,
        # Not a Mamba2Config parameter (HF always gates before the norm); stored so a reader sees it.
        norm_before_gate=p["norm_before_gate"],
    )


def realistic_init(model, p, gen):
    """Overwrite every parameter with the realistic Mamba2 init (fixed generator), rounded to bf16."""
    H = p["hidden_size"]
    I = p["expand"] * H
    nh = p["num_heads"]

    def normal(shape, std, mean=0.0):
        return torch.randn(shape, generator=gen, dtype=torch.float32) * std + mean

    def uniform(shape, lo, hi):
        return torch.rand(shape, generator=gen, dtype=torch.float32) * (hi - lo) + lo

    new = {}
    bb = model.backbone
    new["backbone.embeddings.weight"] = normal(bb.embeddings.weight.shape, 0.25)
    for i, layer in enumerate(bb.layers):
        pre = f"backbone.layers.{i}."
        mx = layer.mixer
        new[pre + "norm.weight"] = normal((H,), 0.1, 1.0)
        new[pre + "mixer.in_proj.weight"] = normal(mx.in_proj.weight.shape, 1.0 / math.sqrt(H))
        if mx.in_proj.bias is not None:
            new[pre + "mixer.in_proj.bias"] = normal(mx.in_proj.bias.shape, 0.05)
        new[pre + "mixer.conv1d.weight"] = uniform(mx.conv1d.weight.shape, -0.5, 0.5)
        if mx.conv1d.bias is not None:
            new[pre + "mixer.conv1d.bias"] = normal(mx.conv1d.bias.shape, 0.1)
        # A = -exp(A_log) uniform in [-16, -1]
        new[pre + "mixer.A_log"] = torch.log(uniform((nh,), 1.0, 16.0))
        # dt log-uniform in [1e-3, 1e-1], dt_bias = inverse softplus(dt)
        dt = torch.exp(uniform((nh,), math.log(1e-3), math.log(1e-1))).clamp(min=1e-4)
        new[pre + "mixer.dt_bias"] = dt + torch.log(-torch.expm1(-dt))
        new[pre + "mixer.D"] = normal((nh,), 0.05, 1.0)
        new[pre + "mixer.norm.weight"] = normal((I,), 0.1, 1.0)
        new[pre + "mixer.out_proj.weight"] = normal(mx.out_proj.weight.shape, 0.5 / math.sqrt(I))
        if mx.out_proj.bias is not None:
            new[pre + "mixer.out_proj.bias"] = normal(mx.out_proj.bias.shape, 0.05)
    new["backbone.norm_f.weight"] = normal((H,), 0.1, 1.0)
    if not p["tie_word_embeddings"]:
        new["lm_head.weight"] = normal(model.lm_head.weight.shape, 0.25)

    params = dict(model.named_parameters())
    missing = [k for k in params if k not in new and not (k == "lm_head.weight" and p["tie_word_embeddings"])]
    if missing:
        raise RuntimeError(f"parameters without an init: {missing}")
    with torch.no_grad():
        for k, v in new.items():
            params[k].copy_(v.to(torch.bfloat16).to(params[k].dtype))
    return model


# ----------------------------------------------------------------------------------------------------------
# safetensors helpers
# ----------------------------------------------------------------------------------------------------------

def read_safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def load_tensors(path):
    from safetensors.torch import load_file
    return load_file(path)


def write_logits(path, logits_f32, metadata):
    assert logits_f32.dtype == torch.float32 and logits_f32.dim() == 2
    # Written by hand (the safetensors package orders __metadata__ at random, so its files are not
    # byte-reproducible); read back with the package below when it is installed.
    assert sys.byteorder == "little"
    t = logits_f32.contiguous()
    try:
        raw = t.numpy().tobytes()
    except (ImportError, RuntimeError):  # torch without numpy
        raw = bytes(t.view(torch.uint8).reshape(-1).tolist())
    header = {"__metadata__": dict(sorted(metadata.items())),
              "logits": {"dtype": "F32", "shape": list(t.shape), "data_offsets": [0, len(raw)]}}
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        f.write(raw)
    try:
        from safetensors import safe_open
    except ImportError:
        return "hand-written, not read back (no safetensors package)"
    with safe_open(path, framework="pt") as f:
        back = f.get_tensor("logits")
        if not torch.equal(back, t) or f.metadata() != metadata:
            raise RuntimeError("logits file does not read back")
    return "hand-written, read back with the safetensors package"


# ----------------------------------------------------------------------------------------------------------
# The float64 reference (original mamba_ssm semantics, plain sequential recurrence)
# ----------------------------------------------------------------------------------------------------------

def json_float(v):
    """A float from config.json. transformers >= 5 writes infinity as {"__float__": "Infinity"}; older
    versions write a bare Infinity token (which Python's json reads as float('inf'))."""
    if isinstance(v, dict) and "__float__" in v:
        v = v["__float__"]
    return float(v)


def _softplus64(x):
    return torch.where(x > 30.0, x, torch.log1p(torch.exp(torch.clamp(x, max=30.0))))


def _silu64(x):
    return x / (1.0 + torch.exp(-x))


def _rmsnorm64(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def _mamba2_mixer64(xn, g, I, nh, P, N, G, K, eps, lo, hi, norm_before_gate, unclamped_from=None):
    """One Mamba2 mixer in float64, original mamba_ssm semantics. xn: [T, H] (the normed input); g(name)
    returns the mixer's parameter `name` ("in_proj.weight", "conv1d.bias", ...) or None when absent.
    Returns (out [T, H], number of clamped dt, number of dt)."""
    f64 = torch.float64
    T = xn.shape[0]
    heads_per_group = nh // G
    conv_dim = I + 2 * G * N
    zxbcdt = xn @ g("in_proj.weight").T
    if g("in_proj.bias") is not None:
        zxbcdt = zxbcdt + g("in_proj.bias")
    assert zxbcdt.shape[1] == I + conv_dim + nh, "in_proj rows must be [z, xBC, dt] (no d_mlp part)"
    z = zxbcdt[:, :I]
    xBC = zxbcdt[:, I:I + conv_dim]
    dt_raw = zxbcdt[:, I + conv_dim:]

    # causal depthwise conv (zero left padding) + bias, then SiLU
    cw = g("conv1d.weight").reshape(conv_dim, K)
    conv = torch.zeros(T, conv_dim, dtype=f64)
    for t in range(T):
        acc = torch.zeros(conv_dim, dtype=f64)
        for k in range(K):
            s = t - (K - 1) + k
            if s >= 0:
                acc = acc + cw[:, k] * xBC[s]
        conv[t] = acc
    if g("conv1d.bias") is not None:
        conv = conv + g("conv1d.bias")
    xBC = _silu64(conv)
    x = xBC[:, :I].reshape(T, nh, P)
    B = xBC[:, I:I + G * N].reshape(T, G, N)
    C = xBC[:, I + G * N:].reshape(T, G, N)

    dt_unclamped = _softplus64(dt_raw + g("dt_bias"))  # [T, nh]
    dt = torch.clamp(dt_unclamped, min=lo, max=hi)
    if unclamped_from is not None:
        dt[unclamped_from:] = dt_unclamped[unclamped_from:]
    n_clamped = int(((dt_unclamped < lo) | (dt_unclamped > hi)).sum())
    n_dt = dt.numel()
    A = -torch.exp(g("A_log"))  # [nh]
    Dp = g("D")
    group_of_head = torch.arange(nh) // heads_per_group

    # plain sequential recurrence over tokens
    state = torch.zeros(nh, P, N, dtype=f64)
    y = torch.zeros(T, nh, P, dtype=f64)
    for t in range(T):
        Bh = B[t][group_of_head]  # [nh, N]
        Ch = C[t][group_of_head]
        dA = torch.exp(dt[t] * A)  # [nh]
        state = state * dA[:, None, None] + (dt[t][:, None] * x[t])[:, :, None] * Bh[:, None, :]
        y[t] = (state * Ch[:, None, :]).sum(-1) + Dp[:, None] * x[t]
    y = y.reshape(T, I)

    # gated RMSNorm per group of I / n_groups
    nw = g("norm.weight")
    gs = I // G
    if norm_before_gate:
        yg = y.reshape(T, G, gs)
        yn = (yg / torch.sqrt((yg * yg).mean(-1, keepdim=True) + eps)).reshape(T, I) * nw
        u = yn * _silu64(z)
    else:
        ug = (y * _silu64(z)).reshape(T, G, gs)
        u = (ug / torch.sqrt((ug * ug).mean(-1, keepdim=True) + eps)).reshape(T, I) * nw

    out = u @ g("out_proj.weight").T
    if g("out_proj.bias") is not None:
        out = out + g("out_proj.bias")
    return out, n_clamped, n_dt


def reference_forward(W, cfg, tokens, stats=None, unclamped_from=None):
    """W: dict name -> float64 tensor (the checkpoint's values widened). Returns float64 logits [T, vocab].
    unclamped_from (diagnostics only): rows >= this index skip the time_step_limit clamp."""
    H = cfg["hidden_size"]
    I = int(cfg["expand"] * H)
    nh, P, N, G = cfg["num_heads"], cfg["head_dim"], cfg["state_size"], cfg["n_groups"]
    K = cfg["conv_kernel"]
    eps = cfg["layer_norm_epsilon"]
    lo, hi = (json_float(v) for v in cfg["time_step_limit"])
    assert nh * P == I and nh % G == 0
    ids = torch.tensor(tokens, dtype=torch.long)

    h = W["backbone.embeddings.weight"][ids]  # [T, H]
    n_clamped = 0
    n_dt = 0
    for l in range(cfg["num_hidden_layers"]):
        pre = f"backbone.layers.{l}."
        residual = h
        xn = _rmsnorm64(h, W.get(pre + "norm.weight"), eps)
        out, nc, nd = _mamba2_mixer64(xn, lambda name: W.get(pre + "mixer." + name), I, nh, P, N, G, K, eps,
                                      lo, hi, cfg.get("norm_before_gate", False), unclamped_from)
        n_clamped += nc
        n_dt += nd
        h = residual + out
        if stats is not None:
            stats.setdefault("residual_rms_per_layer", []).append(float(h.pow(2).mean().sqrt()))

    h = _rmsnorm64(h, W["backbone.norm_f.weight"], eps)
    lm = W.get("lm_head.weight")
    if lm is None:
        lm = W["backbone.embeddings.weight"]
    if stats is not None:
        stats["dt_clamped"] = n_clamped
        stats["dt_total"] = n_dt
    return h @ lm.T


# ----------------------------------------------------------------------------------------------------------
# Hugging Face comparisons
# ----------------------------------------------------------------------------------------------------------

def _f64_rmsnorm_forward(mod):
    def fwd(hidden_states):
        x = hidden_states
        return mod.weight * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon))
    return fwd


def _f64_gated_norm_forward(mod, n_groups):
    def fwd(hidden_states, gate=None):
        x = hidden_states
        if gate is not None:
            x = x * torch.nn.functional.silu(gate)
        shp = x.shape
        xg = x.reshape(*shp[:-1], n_groups, shp[-1] // n_groups)
        xg = xg / torch.sqrt(xg.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon)
        return mod.weight * xg.reshape(shp)
    return fwd


@contextlib.contextmanager
def hf_clean_f64(model, gated_norm_groups):
    """Remove Hugging Face's internal fp32 casts for a float64 run, and optionally make its gated norm
    per-group. Without this, `model.double()` still computes the SSD inputs (`.float()`), A (`A_log.float()`),
    the RMSNorms (`.to(torch.float32)`) and the residual (`residual_in_fp32`) in fp32."""
    orig_float = torch.Tensor.float
    own_attr = "float" in torch.Tensor.__dict__

    def _float(self, *a, **k):
        if self.dtype == torch.float64 and not a and not k:
            return self
        return orig_float(self, *a, **k)

    patched = []
    saved_res = []
    torch.Tensor.float = _float
    try:
        bb = model.backbone
        for layer in bb.layers:
            layer.norm.forward = _f64_rmsnorm_forward(layer.norm)
            patched.append(layer.norm)
            layer.mixer.norm.forward = _f64_gated_norm_forward(layer.mixer.norm, gated_norm_groups)
            patched.append(layer.mixer.norm)
            saved_res.append((layer, layer.residual_in_fp32))
            layer.residual_in_fp32 = False
        bb.norm_f.forward = _f64_rmsnorm_forward(bb.norm_f)
        patched.append(bb.norm_f)
        yield
    finally:
        if own_attr:
            torch.Tensor.float = orig_float
        else:
            del torch.Tensor.float
        for m in patched:
            del m.forward
        for layer, v in saved_res:
            layer.residual_in_fp32 = v


def err(a, b):
    a = a.to(torch.float64)
    b = b.to(torch.float64)
    d = a - b
    return {"max_abs": float(d.abs().max()), "rel_fro": float(d.norm() / b.norm())}


def hf_decode_logits(model, ids):
    """Token-by-token with HF's cache (first token as a 1-token prefill)."""
    rows = []
    out = None
    for t in range(ids.shape[1]):
        kw = dict(use_cache=True)
        if out is not None:
            kw["cache_params"] = out.cache_params
        try:
            out = model(ids[:, t:t + 1], cache_position=torch.tensor([t]), **kw)
        except TypeError:
            out = model(ids[:, t:t + 1], **kw)
        rows.append(out.logits[0, -1])
    return torch.stack(rows)


def hf_comparisons(model_dir, ref64, tokens, n_groups, ref64_unclamped=None):
    from transformers import Mamba2ForCausalLM
    model = Mamba2ForCausalLM.from_pretrained(model_dir).double().eval()
    ids = torch.tensor([tokens], dtype=torch.long)
    res = {}
    with torch.no_grad():
        # 1. as shipped: model.double(), full-sequence forward without cache (torch_forward chunked SSD path)
        res["hf_f64_as_is"] = err(model(ids, use_cache=False).logits[0], ref64)
        # 2. fp32 casts removed, HF's own whole-width gated norm
        with hf_clean_f64(model, 1):
            res["hf_f64_clean_fullwidth_norm"] = err(model(ids, use_cache=False).logits[0], ref64)
        # 3. fp32 casts removed, gated norm made per group (mamba_ssm semantics)
        with hf_clean_f64(model, n_groups):
            res["hf_f64_clean_pergroup_norm"] = err(model(ids, use_cache=False).logits[0], ref64)
            # 4. HF cached token-by-token decode, same patches (informational)
            try:
                dec = hf_decode_logits(model, ids)
                res["hf_f64_clean_pergroup_norm_cached_decode"] = err(dec, ref64)
                for name, r in (ref64_unclamped or {}).items():
                    # does HF's decode ignore time_step_limit? compare with our reference without the clamp
                    res["hf_f64_clean_pergroup_norm_cached_decode_vs_own_" + name] = err(dec, r)
            except Exception as e:  # API differs across versions; report, don't fail
                res["hf_f64_clean_pergroup_norm_cached_decode"] = {"error": f"{type(e).__name__}: {e}"[:300]}
    return res


# ----------------------------------------------------------------------------------------------------------
# GraniteMoeHybrid (preset granite-hybrid): Mamba2 and attention layers, each followed by a top-k MoE plus a
# shared SwiGLU MLP, with the µP multipliers of Granite 4.0
# ----------------------------------------------------------------------------------------------------------

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
    return (_silu64(hcat[..., :F_]) * hcat[..., F_:]) @ w_out.T


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
        xn = _rmsnorm64(h, W[pre + "input_layernorm.weight"], eps)
        if kinds[l] == "mamba":
            out, nc, nd = _mamba2_mixer64(xn, lambda name: W.get(pre + "mamba." + name), I, nh, P, N, G, K,
                                          eps, lo, hi, False)
            stats["dt_clamped"] = stats.get("dt_clamped", 0) + nc
            stats["dt_total"] = stats.get("dt_total", 0) + nd
        else:
            out = _attention64(xn, lambda name: W.get(pre + "self_attn." + name), cfg, theta)
        h = residual + out * mult_r
        residual = h
        xn = _rmsnorm64(h, W[pre + "post_attention_layernorm.weight"], eps)
        ffn = _swiglu64(xn, W[pre + "shared_mlp.input_linear.weight"], W[pre + "shared_mlp.output_linear.weight"])
        if E > 0:
            forced = (forced_routers or {}).get(pre + "block_sparse_moe.router")
            moe, rl = _moe64(xn, lambda name: W.get(pre + "block_sparse_moe." + name), cfg["num_experts_per_tok"],
                             stats, None if forced is None else forced.to(torch.float64))
            routers[pre + "block_sparse_moe.router"] = rl
            ffn = moe + ffn
        h = residual + ffn * mult_r
        stats.setdefault("residual_rms_per_layer", []).append(float(h.pow(2).mean().sqrt()))
    h = _rmsnorm64(h, W["model.norm.weight"], eps)
    lm = W.get("lm_head.weight")
    if lm is None:
        lm = W["model.embed_tokens.weight"]
    return (h @ lm.T) / cfg["logits_scaling"], routers


def _f64_rope_forward(mod, theta, dim):
    def fwd(x, position_ids):
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        ang = position_ids[:, :, None].to(torch.float64) * inv[None, None, :]
        emb = torch.cat([ang, ang], -1)
        scale = getattr(mod, "attention_scaling", 1.0)
        return (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)
    return fwd


@contextlib.contextmanager
def granite_hf_clean_f64(model, gated_norm_groups, rope_theta, rope_dim):
    """As hf_clean_f64, for GraniteMoeHybrid: `.float()` on float64 is a no-op (SSD inputs, A_log, router
    logits), the RMSNorms and the gated norm compute in float64, and RoPE's cos/sin come from float64
    angles (HF computes inv_freq and the angles in fp32)."""
    orig_float = torch.Tensor.float
    own_attr = "float" in torch.Tensor.__dict__

    def _float(self, *a, **k):
        if self.dtype == torch.float64 and not a and not k:
            return self
        return orig_float(self, *a, **k)

    patched = []
    torch.Tensor.float = _float
    try:
        for _, mod in model.named_modules():
            cls = type(mod).__name__
            if cls.endswith("RMSNormGated"):
                mod.forward = _f64_gated_norm_forward(mod, gated_norm_groups)
            elif cls.endswith("RMSNorm"):
                mod.forward = _f64_rmsnorm_forward(mod)
            elif cls.endswith("RotaryEmbedding"):
                mod.forward = _f64_rope_forward(mod, rope_theta, rope_dim)
            else:
                continue
            patched.append(mod)
        yield
    finally:
        if own_attr:
            torch.Tensor.float = orig_float
        else:
            del torch.Tensor.float
        for m in patched:
            del m.forward


class _RouterTap:
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


def _topk_sets(logits, k):
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
                tap = _RouterTap(model)
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
        e["topk_set_mismatches"] = sum(a != b for a, b in zip(_topk_sets(hf_routers[name], k),
                                                              _topk_sets(ref_routers[name], k)))
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


def write_safetensors(path, tensors, metadata):
    """Several tensors (F32 / I64) in name order with sorted metadata, written by hand (byte-reproducible);
    read back with the safetensors package when it is installed."""
    assert sys.byteorder == "little"
    kinds = {torch.float32: "F32", torch.int64: "I64"}
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs = []
    off = 0
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        raw = t.numpy().tobytes()
        header[name] = {"dtype": kinds[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)))
        f.write(hb)
        for raw in blobs:
            f.write(raw)
    from safetensors import safe_open
    with safe_open(path, framework="pt") as f:
        if f.metadata() != metadata or sorted(f.keys()) != sorted(tensors):
            raise RuntimeError(f"{path} does not read back")
        for name, t in tensors.items():
            if not torch.equal(f.get_tensor(name), t):
                raise RuntimeError(f"{path}: {name} does not read back")


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
        write_safetensors(os.path.join(args.out, "router_logits.safetensors"), rt, rmeta)

    report = {"preset": args.preset, "out": args.out, "config_keys_added": added, "logits_writer": how,
              "files": {f_: os.path.getsize(os.path.join(args.out, f_)) for f_ in sorted(os.listdir(args.out))},
              "weights": weight_shapes, "meta": meta,
              "config_probes": None if args.skip_hf_check else granite_config_probes()}
    print(json.dumps(report, indent=1))
    return 0


# ----------------------------------------------------------------------------------------------------------
# Forced routing (preset granite-hybrid, --forced-routing): Hugging Face run with router logits injected
# ----------------------------------------------------------------------------------------------------------

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


class _RouterForce:
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


def granite_forced_routing_main(args, p):
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
            force = _RouterForce(model, forced)  # first: a tap on the same module then sees the injected values
            tap = _RouterTap(model)
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
    changed = {n: sum(a != b for a, b in zip(_topk_sets(forced[n].to(torch.float64), k),
                                              _topk_sets(natural[n], k)))
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
    write_safetensors(os.path.join(d, "forced_router_logits.safetensors"), rt, rmeta)
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


# ----------------------------------------------------------------------------------------------------------

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

    import transformers
    from transformers import Mamba2ForCausalLM

    p = dict(PRESETS[args.preset])
    if args.seed is not None:
        p["seed"] = args.seed
    if args.tokens is not None:
        p["n_tokens"] = args.tokens
    if args.forced_routing:
        if p.get("arch") != "granite":
            raise SystemExit("--forced-routing needs a GraniteMoeHybrid preset")
        return granite_forced_routing_main(args, p)
    if p.get("arch") == "granite":
        return granite_main(args, p)
    os.makedirs(args.out, exist_ok=True)

    torch.manual_seed(p["seed"])
    gen = torch.Generator().manual_seed(p["seed"])
    config = build_config(p)
    model = Mamba2ForCausalLM(config).eval()
    realistic_init(model, p, gen)
    model = model.to(torch.bfloat16)
    model.save_pretrained(args.out)

    # config.json: make sure every key a reader needs is there
    cfg_path = os.path.join(args.out, "config.json")
    with open(cfg_path) as f:
        cfg = json.load(f)
    added = []
    for k in REQUIRED_CONFIG_KEYS:
        if k not in cfg:
            v = getattr(config, k, p.get(k)) if k != "architectures" else ["Mamba2ForCausalLM"]
            if v is None:
                raise RuntimeError(f"config key {k} missing and not on the config object")
            cfg[k] = list(v) if isinstance(v, tuple) else v
            added.append(k)
    if added:
        with open(cfg_path, "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
    for f_ in os.listdir(args.out):
        if f_ not in ("config.json", "model.safetensors", "tokens.json", "reference_logits.safetensors"):
            os.remove(os.path.join(args.out, f_))  # e.g. generation_config.json

    # the checkpoint as a reader sees it
    st_path = os.path.join(args.out, "model.safetensors")
    hdr = read_safetensors_header(st_path)
    dtypes = sorted({v["dtype"] for k, v in hdr.items() if k != "__metadata__"})
    if dtypes != ["BF16"]:
        raise RuntimeError(f"checkpoint dtypes {dtypes}, expected only BF16")
    tensors = load_tensors(st_path)
    W = {k: v.to(torch.float64) for k, v in tensors.items()}
    sd = model.state_dict()
    expected = set(sd) - ({"lm_head.weight"} if p["tie_word_embeddings"] else set())
    if not expected <= set(tensors) <= set(sd):
        raise RuntimeError(f"checkpoint names {sorted(tensors)} vs model {sorted(sd)}")
    for k, v in tensors.items():
        if not torch.equal(v, sd[k]):
            raise RuntimeError(f"saved tensor {k} differs from the model")

    gen_tok = torch.Generator().manual_seed(p["seed"] + 1)
    tokens = torch.randint(0, p["vocab_size"], (p["n_tokens"],), generator=gen_tok).tolist()
    with open(os.path.join(args.out, "tokens.json"), "w") as f:
        json.dump(tokens, f)
        f.write("\n")

    stats = {}
    ref64 = reference_forward(W, cfg, tokens, stats)

    ref64_unclamped = None
    if any(math.isfinite(json_float(v)) and json_float(v) != 0.0 for v in cfg["time_step_limit"]):
        ref64_unclamped = {
            # no clamp at all
            "unclamped": reference_forward(W, cfg, tokens, unclamped_from=0),
            # clamp only row 0 (HF runs it as a 1-token prefill), not the decode rows
            "clamp_row0_only": reference_forward(W, cfg, tokens, unclamped_from=1),
        }
    cmp = {} if args.skip_hf_check else hf_comparisons(args.out, ref64, tokens, cfg["n_groups"], ref64_unclamped)

    meta = {
        "reference": "float64 own implementation (tools/hf_reference.py reference_forward): sequential "
                     "recurrence, dt clamped to time_step_limit, gated RMSNorm per group of "
                     "intermediate/n_groups; bf16 weights widened to float64; rounded to fp32 at the end",
        "preset": args.preset,
        "seed": str(p["seed"]),
        "rows": str(len(tokens)),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
        "dt_clamped": f"{stats['dt_clamped']}/{stats['dt_total']}",
        "logits_std": f"{float(ref64.std()):.4g}",
        "logits_max_abs": f"{float(ref64.abs().max()):.4g}",
        "residual_rms_per_layer": json.dumps([round(v, 4) for v in stats["residual_rms_per_layer"]]),
    }
    for name, r in cmp.items():
        meta["vs_" + name] = json.dumps(r)
    if "hf_f64_clean_pergroup_norm" in cmp:
        meta["max_abs_diff_vs_hf"] = repr(cmp["hf_f64_clean_pergroup_norm"]["max_abs"])
    how = write_logits(os.path.join(args.out, "reference_logits.safetensors"), ref64.to(torch.float32), meta)

    report = {"preset": args.preset, "out": args.out, "config_keys_added": added, "logits_writer": how,
              "files": {f_: os.path.getsize(os.path.join(args.out, f_)) for f_ in sorted(os.listdir(args.out))},
              "meta": meta}
    print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
