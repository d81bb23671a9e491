"""LLM.score: the CLI's `score`, bit for bit, with the numerics stated."""

import json

import numpy as np
import pytest

from conftest import TEST_DATA, ids, read_safetensors, run_cli, same_bits

TOKENS = [(7 * i + 3) % 512 for i in range(40)]


@pytest.mark.parametrize(
    "flags,kwargs",
    [
        ([], {}),
        (["--exact"], {"exact": True}),
        (["--exact", "--mamba-ssm-cache-dtype", "bfloat16", "--exact-grid", "16"],
         {"exact": True, "mamba_ssm_cache_dtype": "bfloat16", "exact_grid": 16}),
    ],
)
def test_score_equals_cli_bit_for_bit(parity, tmp_path, flags, kwargs):
    out = tmp_path / "score.safetensors"
    run_cli("score", "builtin:tiny", "--tokens", ids(TOKENS), "--out", out, "--threads", 2, *flags)
    cli, meta = read_safetensors(out)
    llm = parity.LLM("builtin:tiny", threads=2, **kwargs)
    got = llm.score(TOKENS)
    assert got.dtype == np.float32 and got.shape == (len(TOKENS), llm.vocab_size) == (40, 512)
    assert same_bits(got, cli["logits"])
    # The numerics the module states are the ones the CLI recorded in the file.
    for k, v in llm.numerics.items():
        assert meta[k] == v


def test_score_modes_differ(tiny_exact, tiny_plain):
    # The companion of the bit-for-bit checks: a different numerics gives different bits.
    assert tiny_exact.numerics["numerics"] == "exact" and tiny_plain.numerics["numerics"] == "plain"
    assert not same_bits(tiny_exact.score(TOKENS), tiny_plain.score(TOKENS))


def test_score_takes_numpy_tokens(tiny_exact):
    a = tiny_exact.score(np.array(TOKENS[:10], dtype=np.int64))
    assert same_bits(a, tiny_exact.score(TOKENS[:10]))
    # Row t depends on tokens[0..t] only.
    assert same_bits(a[:5], tiny_exact.score(TOKENS[:5]))


def test_score_with_tensor_replacement_equals_cli(parity, tmp_path):
    fixture = TEST_DATA / "granite_hybrid"
    routers = fixture / "forced_router_logits.safetensors"
    cfg = {"tensor_replacement": {"tensors_path": str(routers)}}
    tokens = json.loads((fixture / "tokens.json").read_text())
    out = tmp_path / "score.safetensors"
    run_cli("score", fixture, "--tokens", ids(tokens), "--out", out, "--threads", 2,
            "--additional-config", json.dumps(cfg))
    cli, _ = read_safetensors(out)
    with_replacement = parity.LLM(str(fixture), additional_config=cfg, threads=2).score(tokens)
    assert same_bits(with_replacement, cli["logits"])
    # Without the injection the routers are parity's own: the logits differ.
    assert not same_bits(parity.LLM(str(fixture), threads=2).score(tokens), with_replacement)
