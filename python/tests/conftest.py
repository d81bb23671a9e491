"""Shared helpers: the parity binary (for bit-for-bit comparisons with the CLI) and a small
safetensors reader, so the tests need nothing beyond numpy and pytest."""

import json
import os
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
BINARY = os.environ.get("PARITY_BINARY", str(REPO / "build" / "parity"))
TEST_DATA = Path(os.environ.get("PARITY_TEST_DATA", str(REPO / "tests" / "data")))


def run_cli(*args, check=True):
    """Runs `parity ARGS...`; returns the CompletedProcess (text stdout/stderr)."""
    r = subprocess.run([BINARY, *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"parity {' '.join(map(str, args))} exited {r.returncode}:\n{r.stderr}")
    return r


_DTYPES = {"F32": np.float32, "I64": np.int64, "I32": np.int32, "F16": np.float16}


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata) of a safetensors file (BF16 is not needed here)."""
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for name, e in header.items():
        b, end = e["data_offsets"]
        buf = data[8 + n + b : 8 + n + end]
        out[name] = np.frombuffer(buf, dtype=_DTYPES[e["dtype"]]).reshape(e["shape"])
    return out, meta


def same_bits(a, b):
    """Bit-for-bit equality of two float32 arrays (NaN-safe, -0.0 distinct from 0.0)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    b = np.ascontiguousarray(b, dtype=np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def ids(tokens):
    return ",".join(str(t) for t in tokens)


@pytest.fixture(scope="session")
def parity():
    import parity as module

    return module


@pytest.fixture(scope="session")
def tiny_exact(parity):
    return parity.LLM("builtin:tiny", exact=True, threads=2)


@pytest.fixture(scope="session")
def tiny_plain(parity):
    return parity.LLM("builtin:tiny", threads=2)
