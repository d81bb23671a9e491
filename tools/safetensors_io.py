"""The one safetensors writer (and the two readers) of the Python tools.

Files are written by hand, not with the safetensors package, because the package orders `__metadata__` at
random and its files are therefore not byte-reproducible. Here the header is compact JSON: `__metadata__`
first with its keys sorted, then the tensors in the order given, padded with spaces to a multiple of 8 bytes;
the data follow in the same order. When the safetensors package is installed, every file is read back with
it (names, metadata, every tensor) before the writer returns.

    write_safetensors(path, [(name, tensor), ...], metadata)   any number of tensors, in that order
    write_logits(path, logits, metadata)                        one F32 tensor `logits` [rows, vocab]
    read_safetensors_header(path), load_tensors(path)

Used by hf_reference.py (and its modules) and capture_hf.py. Needs torch.
"""

import json
import os
import struct
import sys

import torch

DTYPE_NAMES = {torch.float64: "F64", torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
               torch.int64: "I64", torch.int32: "I32"}


def tensor_bytes(t):
    """The tensor's data, little-endian, row-major."""
    assert sys.byteorder == "little"
    t = t.contiguous()
    try:
        return t.numpy().tobytes()
    except (ImportError, RuntimeError, TypeError):  # torch without numpy, or a dtype numpy lacks (bf16)
        return bytes(t.view(torch.uint8).reshape(-1).tolist())


def safetensors_bytes(tensors, metadata):
    """The whole file for tensors [(name, tensor), ...] (in that order) and metadata {str: str}."""
    header = {"__metadata__": dict(sorted(metadata.items()))}
    blobs = []
    off = 0
    for name, t in tensors:
        if name in header:
            raise ValueError(f"tensor name {name!r} given twice (or is __metadata__)")
        raw = tensor_bytes(t)
        header[name] = {"dtype": DTYPE_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    return struct.pack("<Q", len(hb)) + hb + b"".join(blobs)


def write_safetensors(path, tensors, metadata):
    """Writes tensors [(name, tensor), ...] in that order with metadata {str: str} to path (through a
    temporary file, replaced at the end), then reads it back with the safetensors package when installed.
    Returns how it was written (for reports)."""
    tensors = list(tensors)
    if not all(isinstance(v, str) for v in metadata.values()):
        raise TypeError("safetensors metadata values must be strings")
    data = safetensors_bytes(tensors, metadata)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
    try:
        from safetensors import safe_open
    except ImportError:
        return "hand-written, not read back (no safetensors package)"
    with safe_open(path, framework="pt") as f:
        if f.metadata() != metadata or sorted(f.keys()) != sorted(n for n, _ in tensors):
            raise RuntimeError(f"{path} does not read back")
        for name, t in tensors:
            if not torch.equal(f.get_tensor(name), t):
                raise RuntimeError(f"{path}: {name} does not read back")
    return "hand-written, read back with the safetensors package"


def write_logits(path, logits_f32, metadata):
    """A logits file (the format of `parity score`): one F32 tensor `logits` [rows, vocab]."""
    assert logits_f32.dtype == torch.float32 and logits_f32.dim() == 2
    return write_safetensors(path, [("logits", logits_f32)], metadata)


def read_safetensors_header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def load_tensors(path):
    from safetensors.torch import load_file
    return load_file(path)
