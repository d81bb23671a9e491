"""Running Hugging Face models in float64 for real: `model.double()` alone still computes parts in fp32 (the
`.float()` calls on the SSD inputs, A_log and router logits, the fp32 RMSNorms, `residual_in_fp32`, RoPE angles
in fp32). These context managers patch those away for one run (and restore everything on exit):

    hf_clean_f64(model, gated_norm_groups)                                   Mamba2ForCausalLM
    granite_hf_clean_f64(model, gated_norm_groups, rope_theta, rope_dim)     GraniteMoeHybridForCausalLM

gated_norm_groups = n_groups makes the gated RMSNorm per group (mamba_ssm's and parity's semantics); 1 keeps
Hugging Face's whole-width norm. Used by hf_reference.py (its Mamba2, Granite and forced-routing parts) and
capture_hf.py. Needs torch."""

import contextlib

import torch


@contextlib.contextmanager
def _float_noop_on_f64():
    """`Tensor.float()` without arguments returns a float64 tensor unchanged while the context is open."""
    orig_float = torch.Tensor.float
    own_attr = "float" in torch.Tensor.__dict__

    def _float(self, *a, **k):
        if self.dtype == torch.float64 and not a and not k:
            return self
        return orig_float(self, *a, **k)

    torch.Tensor.float = _float
    try:
        yield
    finally:
        if own_attr:
            torch.Tensor.float = orig_float
        else:
            del torch.Tensor.float


def f64_rmsnorm_forward(mod):
    def fwd(hidden_states):
        x = hidden_states
        return mod.weight * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon))
    return fwd


def f64_gated_norm_forward(mod, n_groups):
    def fwd(hidden_states, gate=None):
        x = hidden_states
        if gate is not None:
            x = x * torch.nn.functional.silu(gate)
        shp = x.shape
        xg = x.reshape(*shp[:-1], n_groups, shp[-1] // n_groups)
        xg = xg / torch.sqrt(xg.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon)
        return mod.weight * xg.reshape(shp)
    return fwd


def f64_rope_forward(mod, theta, dim):
    def fwd(x, position_ids):
        inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
        ang = position_ids[:, :, None].to(torch.float64) * inv[None, None, :]
        emb = torch.cat([ang, ang], -1)
        scale = getattr(mod, "attention_scaling", 1.0)
        return (emb.cos() * scale).to(x.dtype), (emb.sin() * scale).to(x.dtype)
    return fwd


@contextlib.contextmanager
def hf_clean_f64(model, gated_norm_groups):
    """Remove Hugging Face's internal fp32 casts for a float64 run, and optionally make its gated norm
    per-group. Without this, `model.double()` still computes the SSD inputs (`.float()`), A (`A_log.float()`),
    the RMSNorms (`.to(torch.float32)`) and the residual (`residual_in_fp32`) in fp32."""
    patched = []
    saved_res = []
    with _float_noop_on_f64():
        try:
            bb = model.backbone
            for layer in bb.layers:
                layer.norm.forward = f64_rmsnorm_forward(layer.norm)
                patched.append(layer.norm)
                layer.mixer.norm.forward = f64_gated_norm_forward(layer.mixer.norm, gated_norm_groups)
                patched.append(layer.mixer.norm)
                saved_res.append((layer, layer.residual_in_fp32))
                layer.residual_in_fp32 = False
            bb.norm_f.forward = f64_rmsnorm_forward(bb.norm_f)
            patched.append(bb.norm_f)
            yield
        finally:
            for m in patched:
                del m.forward
            for layer, v in saved_res:
                layer.residual_in_fp32 = v


@contextlib.contextmanager
def granite_hf_clean_f64(model, gated_norm_groups, rope_theta, rope_dim):
    """As hf_clean_f64, for GraniteMoeHybrid: `.float()` on float64 is a no-op (SSD inputs, A_log, router
    logits), the RMSNorms and the gated norm compute in float64, and RoPE's cos/sin come from float64
    angles (HF computes inv_freq and the angles in fp32)."""
    patched = []
    with _float_noop_on_f64():
        try:
            for _, mod in model.named_modules():
                cls = type(mod).__name__
                if cls.endswith("RMSNormGated"):
                    mod.forward = f64_gated_norm_forward(mod, gated_norm_groups)
                elif cls.endswith("RMSNorm"):
                    mod.forward = f64_rmsnorm_forward(mod)
                elif cls.endswith("RotaryEmbedding"):
                    mod.forward = f64_rope_forward(mod, rope_theta, rope_dim)
                else:
                    continue
                patched.append(mod)
            yield
        finally:
            for m in patched:
                del m.forward
