"""Mamba2ForCausalLM: the presets mamba2-g1 and mamba2-g2 of hf_reference.py (which is the command line).

    mamba2_main(args, p)    builds the checkpoint (realistic Mamba2 init, bf16, save_pretrained), tokens.json and
                            reference_logits.safetensors in args.out; p: the preset's parameters
    reference_forward       the float64 reference (original mamba_ssm semantics: sequential recurrence, dt
                            clamped to time_step_limit, gated RMSNorm per group of intermediate/n_groups)
    hf_comparisons          the same logits from Hugging Face in float64 (hf_f64.hf_clean_f64), as shipped and
                            clean, full-sequence and cached decode

Needs torch and transformers; computes on the CPU and downloads nothing.
"""

import json
import math
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network (e.g. hub kernels)

import torch  # noqa: E402

from hf_f64 import hf_clean_f64  # noqa: E402
from ref64 import err, json_float, mamba2_mixer64, rmsnorm64  # noqa: E402
from safetensors_io import load_tensors, read_safetensors_header, write_logits  # noqa: E402

MAMBA2_PRESETS = {
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
}

REQUIRED_CONFIG_KEYS = [
    "architectures", "vocab_size", "hidden_size", "num_hidden_layers", "num_heads", "head_dim", "state_size",
    "n_groups", "expand", "conv_kernel", "chunk_size", "use_bias", "use_conv_bias", "layer_norm_epsilon",
    "rms_norm", "norm_before_gate", "residual_in_fp32", "tie_word_embeddings", "time_step_limit", "hidden_act",
]


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
        xn = rmsnorm64(h, W.get(pre + "norm.weight"), eps)
        out, nc, nd = mamba2_mixer64(xn, lambda name: W.get(pre + "mixer." + name), I, nh, P, N, G, K, eps,
                                      lo, hi, cfg.get("norm_before_gate", False), unclamped_from)
        n_clamped += nc
        n_dt += nd
        h = residual + out
        if stats is not None:
            stats.setdefault("residual_rms_per_layer", []).append(float(h.pow(2).mean().sqrt()))

    h = rmsnorm64(h, W["backbone.norm_f.weight"], eps)
    lm = W.get("lm_head.weight")
    if lm is None:
        lm = W["backbone.embeddings.weight"]
    if stats is not None:
        stats["dt_clamped"] = n_clamped
        stats["dt_total"] = n_dt
    return h @ lm.T


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


def mamba2_main(args, p):
    """Builds a Mamba2 fixture folder in args.out from the preset's parameters p."""
    import transformers
    from transformers import Mamba2ForCausalLM

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

    # The texts naming tools/hf_reference.py are in the committed fixtures (byte-reproducible): keep them.
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
