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


@contextlib.contextmanager
def _f32_casts_noop_on_f64():
    """`.to(torch.float32)` / `.to(dtype=torch.float32)` / `.type(torch.float32)` of a float64 tensor keep float64
    while the context is open (the families' routers, norms and mixers cast to fp32 in these spellings too)."""
    orig_to = torch.Tensor.to
    orig_type = torch.Tensor.type
    own_to = "to" in torch.Tensor.__dict__
    own_type = "type" in torch.Tensor.__dict__

    def _to(self, *a, **k):
        if self.dtype == torch.float64:
            a = tuple(torch.float64 if x is torch.float32 else x for x in a)
            if k.get("dtype") is torch.float32:
                k["dtype"] = torch.float64
        return orig_to(self, *a, **k)

    def _type(self, dtype=None, *a, **k):
        if self.dtype == torch.float64 and dtype in (torch.float32, "torch.FloatTensor"):
            return self
        if dtype is None:
            return orig_type(self, *a, **k)
        return orig_type(self, dtype, *a, **k)

    torch.Tensor.to = _to
    torch.Tensor.type = _type
    try:
        yield
    finally:
        for name, orig, own in (("to", orig_to, own_to), ("type", orig_type, own_type)):
            if own:
                setattr(torch.Tensor, name, orig)
            else:
                delattr(torch.Tensor, name)


def f64_gated_norm_any_forward(mod, n_groups):
    """A gated RMSNorm of any family in float64: groups from the module (`group_size`: NemotronH's Zamba2 norm;
    `n_groups`: FalconH1's) or else n_groups; `norm_before_gate` (FalconH1) honoured, else gate first."""
    before = bool(getattr(mod, "norm_before_gate", False))

    def fwd(hidden_states, gate=None):
        x = hidden_states
        width = x.shape[-1]
        if getattr(mod, "group_size", None):
            g = width // int(mod.group_size)
        elif getattr(mod, "n_groups", None):
            g = int(mod.n_groups)
        else:
            g = n_groups
        if gate is not None and not before:
            x = x * torch.nn.functional.silu(gate)
        shp = x.shape
        xg = x.reshape(*shp[:-1], g, shp[-1] // g)
        xg = xg / torch.sqrt(xg.pow(2).mean(-1, keepdim=True) + mod.variance_epsilon)
        y = mod.weight * xg.reshape(shp)
        if gate is not None and before:
            y = y * torch.nn.functional.silu(gate)
        return y
    return fwd


@contextlib.contextmanager
def hf_generic_clean_f64(model, gated_norm_groups, rope_theta):
    """Any hybrid family (NemotronH, Bamba, FalconH1) in float64 for real: `.float()`, `.to(float32)` and
    `.type(float32)` of float64 tensors are no-ops, every RMSNorm and gated norm computes in float64 (gated norms
    per group), and RoPE's cos/sin come from float64 angles (rotary dim = 2 * len(inv_freq), so partial
    rotary is covered) when rope_theta is given and the rotary type is the default one."""
    patched = []
    with _float_noop_on_f64(), _f32_casts_noop_on_f64():
        try:
            for _, mod in model.named_modules():
                cls = type(mod).__name__
                if cls.endswith("RMSNormGated"):
                    mod.forward = f64_gated_norm_any_forward(mod, gated_norm_groups)
                elif cls.endswith("RMSNorm"):
                    mod.forward = f64_rmsnorm_forward(mod)
                elif cls.endswith("RotaryEmbedding") and rope_theta is not None and \
                        getattr(mod, "rope_type", "default") == "default" and hasattr(mod, "inv_freq"):
                    mod.forward = f64_rope_forward(mod, rope_theta, 2 * int(mod.inv_freq.shape[-1]))
                else:
                    continue
                patched.append(mod)
            yield
        finally:
            for m in patched:
                del m.forward
