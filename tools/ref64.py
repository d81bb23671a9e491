"""Float64 building blocks shared by the references of hf_reference.py (Mamba2 and GraniteMoeHybrid): the
Mamba2 mixer in the original mamba_ssm semantics, RMSNorm, SiLU, softplus, a config float reader, and the error
measure the comparisons report. Needs torch."""

import torch


def json_float(v):
    """A float from config.json. transformers >= 5 writes infinity as {"__float__": "Infinity"}; older
    versions write a bare Infinity token (which Python's json reads as float('inf'))."""
    if isinstance(v, dict) and "__float__" in v:
        v = v["__float__"]
    return float(v)


def softplus64(x):
    return torch.where(x > 30.0, x, torch.log1p(torch.exp(torch.clamp(x, max=30.0))))


def silu64(x):
    return x / (1.0 + torch.exp(-x))


def rmsnorm64(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def mamba2_mixer64(xn, g, I, nh, P, N, G, K, eps, lo, hi, norm_before_gate, unclamped_from=None):
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
    xBC = silu64(conv)
    x = xBC[:, :I].reshape(T, nh, P)
    B = xBC[:, I:I + G * N].reshape(T, G, N)
    C = xBC[:, I + G * N:].reshape(T, G, N)

    dt_unclamped = softplus64(dt_raw + g("dt_bias"))  # [T, nh]
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
        u = yn * silu64(z)
    else:
        ug = (y * silu64(z)).reshape(T, G, gs)
        u = (ug / torch.sqrt((ug * ug).mean(-1, keepdim=True) + eps)).reshape(T, I) * nw

    out = u @ g("out_proj.weight").T
    if g("out_proj.bias") is not None:
        out = out + g("out_proj.bias")
    return out, n_clamped, n_dt


def err(a, b):
    a = a.to(torch.float64)
    b = b.to(torch.float64)
    d = a - b
    return {"max_abs": float(d.abs().max()), "rel_fro": float(d.norm() / b.norm())}
